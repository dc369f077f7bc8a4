"""IPUMultiWorkerStrategyV1 in TF1 graphs, as Graphcore's ipu_multi_worker_strategy_test checks
it, one instance per worker: initial values on the host (colocation group ``loc:@cpu``), a host
variable read on the IPU, a sync-on-read variable on the IPU and reduced when read, a distributed
dataset's element as ``x.values[0]``, batch normalisation in ``ipu_compiler.compile`` (its moving
statistics updated and reduced), and a pipeline trained over the workers (its gradients reduced
one by one; only the model's variables are global variables). Writes OUT/multi-worker-tf1-<i>.json.

usage: multi_worker_tf1.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.ops import pipelining_ops  # noqa: E402

import popdist  # noqa: E402

tf.compat.v1.disable_v2_behavior()
out_dir = sys.argv[1]
task = popdist.getInstanceIndex()
out = {"instance": task, "instances": popdist.getNumInstances()}
config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()


def strategy_and_session_config(on_host=True):
    # Each graph's collectives get keys of their own on this worker's server (as in Graphcore's
    # test: the server keeps the keys of the graphs before).
    ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1._collective_key_base += 100000
    strategy = ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1(variables_on_host=on_host)
    session_config = strategy.update_config_proto(tf.compat.v1.ConfigProto())
    return strategy, session_config


def session(strategy, session_config):
    return tf.compat.v1.Session(target=strategy.session_target(), config=session_config)


with tf.Graph().as_default():  # placement and sync-on-read variables (variables on the host)
    strategy, session_config = strategy_and_session_config()
    got = {}
    with strategy.scope():
        v = tf.Variable(1.0)
        got["initial_value_groups"] = [
            g.decode() for g in v.initializer.control_inputs[0].inputs[1].op.colocation_groups()]
        got["initial_value_device"] = v.initializer.control_inputs[0].inputs[1].device

        def replica_fn(x):
            with tf.device("/device:IPU:0"):
                w = tf.compat.v1.get_variable("w", initializer=float(task + 1))
                got["mirrored_read"] = w.value().device
                s = tf.compat.v1.get_variable(
                    "s", initializer=float(task + 1),
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
                got["on_read_class"] = type(s).__name__
                got["on_read_device"] = s.device
                got["on_read_initial_value_device"] = s.values[0].initializer.inputs[1].device
                return s.assign_add(x)

        x = tf.compat.v1.placeholder(tf.float32, shape=())
        add = strategy.run(replica_fn, args=[x])
        with session(strategy, session_config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got["on_read_before"] = float(sess.run(strategy.extended.read_var(
                tf.compat.v1.global_variables()[-1])))
            sess.run(add, feed_dict={x: task + 1.0})
            got["on_read_after"] = float(sess.run(strategy.extended.read_var(
                tf.compat.v1.global_variables()[-1])))
    out["placement"] = got

with tf.Graph().as_default():  # a distributed dataset's element, read as Graphcore's test does
    strategy, session_config = strategy_and_session_config()
    with strategy.scope():
        dataset = tf.data.Dataset.range(12).map(lambda v: tf.cast(v, tf.float32))
        dataset = dataset.batch(2 * out["instances"], drop_remainder=True)  # global batch
        iterator = strategy.experimental_distribute_dataset(
            dataset).make_initializable_iterator()

        def square_sum(x):
            with ipu.scopes.ipu_scope("/device:IPU:0"):
                return tf.reduce_sum(x.values[0] * x.values[0])

        total = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                strategy.run(square_sum, args=[next(iterator)]), axis=None)
        with session(strategy, session_config) as sess:
            sess.run(iterator.initializer)
            out["dataset_sums"] = [float(sess.run(total)) for _ in range(3)]

with tf.Graph().as_default():  # batch normalisation compiled on the IPU
    strategy, session_config = strategy_and_session_config()
    with strategy.scope():
        batch_norm = tf.compat.v1.layers.BatchNormalization(momentum=0.0)

        def normalise(x):
            with ipu.scopes.ipu_scope("/device:IPU:0"):
                return ipu.ipu_compiler.compile(lambda t: batch_norm(t, training=True), [x])[0]

        x = tf.compat.v1.placeholder(tf.float32, shape=(2, 1))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(normalise, args=[x]),
                                axis=None)
        with session(strategy, session_config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(total, feed_dict={x: [[2.0 * (task + 1)], [0.0]]})
            local_mean = batch_norm.moving_mean._get_on_device_or_primary()  # noqa: SLF001
            out["batch_norm"] = {
                "moving_mean_class": type(batch_norm.moving_mean).__name__,
                "local_mean": sess.run(local_mean).tolist(),
                "mean": sess.run(batch_norm.moving_mean).tolist(),
                "variance": sess.run(batch_norm.moving_variance).tolist()}

with tf.Graph().as_default():  # a pipeline over the workers (Graphcore's _test_pipelining)
    strategy, session_config = strategy_and_session_config(on_host=False)
    gac, repeat = 4, 2
    with strategy.scope():
        x = task + 1.0
        dataset = tf.data.Dataset.from_tensor_slices(([x] * 16, [1.0] * 16))
        infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
        outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

        def stage1(feature, label):
            return tf.compat.v1.get_variable("w0", initializer=1.0) * feature, label

        def stage2(partial, label):
            prediction = partial + tf.compat.v1.get_variable("w1", initializer=2.0)
            return tf.compat.v1.losses.mean_squared_error(label, prediction)

        def optimizer_function(loss):
            return pipelining_ops.OptimizerFunctionOutput(
                tf.compat.v1.train.GradientDescentOptimizer(0.5), loss)

        def model():
            return pipelining_ops.pipeline(
                [stage1, stage2], gradient_accumulation_count=gac, repeat_count=repeat,
                infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=optimizer_function,
                reduction_method=ipu.gradient_accumulation.GradientAccumulationReductionMethod.SUM)

        train_op = strategy.run(lambda: ipu.ipu_compiler.compile(model, inputs=[]))
        out["pipeline_global_variables"] = [v.name for v in tf.compat.v1.global_variables()]
        w0, w1 = tf.compat.v1.global_variables()
        with session(strategy, session_config) as sess:
            sess.run(infeed.initializer)
            sess.run(tf.compat.v1.global_variables_initializer())
            weights, metadata = [], tf.compat.v1.RunMetadata()
            for run in range(2):
                options = tf.compat.v1.RunOptions(
                    trace_level=tf.compat.v1.RunOptions.FULL_TRACE) if run else None
                sess.run(train_op, options=options, run_metadata=metadata if run else None)
                weights.append([float(v) for v in sess.run([w0, w1])])
        out["pipeline_weights"] = weights
        out["pipeline_reductions"] = sum(
            1 for d in metadata.step_stats.dev_stats for n in d.node_stats
            if n.node_name.split("/")[-1].startswith("CollectiveReduce"))

with open(os.path.join(out_dir, f"multi-worker-tf1-{task}.json"), "w") as f:
    json.dump(out, f)
