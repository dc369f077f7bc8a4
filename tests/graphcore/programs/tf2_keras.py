"""TF2 checks of IPUStrategy, Keras fit/evaluate/predict and the IPU Keras extensions (gradient
accumulation, pipelining), infeeds/outfeeds in tf.function, the config API and the op modules
(embedding_ops, math_ops, image_ops, dataset_benchmark), written as Graphcore's programs write
them. Writes OUT/tf2-<instance>.json; under poprun-lite every
instance runs it on its own (IPUStrategy is a single-process strategy).

usage: tf2_keras.py OUT_DIR [quick]   (quick: the training checks only)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out = {}
rng = np.random.default_rng(0)
X = rng.normal(size=(32, 3)).astype("float32")
Y = rng.normal(size=(32, 1)).astype("float32")
W0 = rng.normal(size=(3, 1)).astype("float32")


def error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the type is part of what is checked)
        return [type(exc).__name__, str(exc)]
    return None


config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.device_connection.type = ipu.config.DeviceConnectionType.ON_DEMAND
config.optimizations.minimum_remote_tensor_size = 1024
config.optimizations.maximum_reduce_many_buffer_size = 8 * 1024 * 1024
config.scheduling.algorithm = ipu.config.SchedulingAlgorithm.SHORTEST_PATH
config.floating_point_behaviour.esr = ipu.config.StochasticRoundingBehaviour.ON
config.optimizations.merge_remote_buffers = ipu.config.MergeRemoteBuffersBehaviour.MERGE
config.selection_order = ipu.config.SelectionOrder.SNAKE
config.norms.experimental.distributed_batch_norm_replica_group_size = 2
config.matmuls.poplar_options = {"availableMemoryProportion": "0.6"}
if popdist.isPopdistEnvSet():
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
config.configure_ipu_system()
out["instance"] = popdist.getInstanceIndex()
out["config_error"] = error(lambda: setattr(config.scheduling, "algorithm", "SHORTEST_PATH"))

strategy = ipu.ipu_strategy.IPUStrategyV1()
out["num_replicas_in_sync"] = strategy.num_replicas_in_sync
out["alias"] = ipu.ipu_strategy.IPUStrategy is ipu.ipu_strategy.IPUStrategyV1

with strategy.scope():
    v = tf.Variable(1.0)
out["variable_device"] = v.device


def dense_model(kind):
    init = tf.constant_initializer(W0)
    if kind == "sequential":
        return tf.keras.Sequential([tf.keras.layers.Dense(1, use_bias=False, kernel_initializer=init,
                                                          input_shape=(3,))])
    inputs = tf.keras.Input((3,), batch_size=4)
    with tf.keras.ipu.PipelineStage(0):  # Graphcore's Keras API, given to Keras by IPUStrategy
        outputs = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer=init)(inputs)
    return tf.keras.Model(inputs, outputs)


def dataset():
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)


def train(kind="sequential", ga=None, method="sum", pipeline=None, steps_per_execution=8,
          use_strategy=True, epochs=2, momentum=0.9):
    scope = strategy.scope() if use_strategy else tf.distribute.get_strategy().scope()
    with scope:
        model = dense_model(kind)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=momentum), loss="mse",
                      metrics=["mae"], steps_per_execution=steps_per_execution)
        if ga:
            model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=ga,
                                                    gradient_accumulation_reduction_method=method)
        if pipeline:
            if kind == "sequential":
                assignments = model.get_pipeline_stage_assignment()
                for assignment in assignments:
                    assignment.pipeline_stage = 0
                model.set_pipeline_stage_assignment(assignments)
            model.set_pipelining_options(gradient_accumulation_steps_per_replica=pipeline,
                                         device_mapping=[0, 0], gradient_accumulation_reduction_method=method)
        history = model.fit(dataset(), epochs=epochs, verbose=0)
        evaluation = model.evaluate(dataset(), verbose=0)
        prediction = model.predict(X[:8], batch_size=4, verbose=0)
    return {"w": model.get_weights()[0].ravel().tolist(), "loss": history.history["loss"],
            "iterations": int(model.optimizer.iterations.numpy()), "evaluate": evaluation,
            "predict": prediction.ravel().tolist()}


out["fit"] = train()
out["ga_sum"] = train(ga=4)
out["pipelined_sequential"] = train(pipeline=4)
if sys.argv[2:] == ["quick"]:
    with open(os.path.join(sys.argv[1], f"tf2-{out['instance']}.json"), "w") as f:
        json.dump(out, f)
    sys.exit(0)
out["fit_plain_keras"] = train(use_strategy=False)
out["fit_functional"] = train("functional")
out["ga_mean"] = train(ga=4, method="mean")
out["ga_running_mean"] = train("functional", ga=2, method="running_mean")
out["pipelined_functional_mean"] = train("functional", pipeline=4, method="mean")

with strategy.scope():
    model = dense_model("sequential")
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=6)
    model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=4)
    out["ga_steps_per_execution"] = error(lambda: model.fit(dataset(), epochs=1, verbose=0))
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=3)
    out["ga_epoch_steps"] = error(lambda: model.fit(dataset(), epochs=1, verbose=0))
    out["ga_zero"] = error(lambda: model.set_gradient_accumulation_options(
        gradient_accumulation_steps_per_replica=0))
    out["ga_kwargs_opt"] = error(lambda: model.set_gradient_accumulation_options(
        gradient_accumulation_steps_per_replica=2, opt="x"))
    out["pipelining_kwargs_count"] = error(lambda: model.set_pipelining_options(
        gradient_accumulation_count=2))
    out["infeed_dataset_kwarg"] = error(lambda: model.set_infeed_queue_options(dataset=1))
    out["outfeed_mode_kwarg"] = error(lambda: model.set_outfeed_queue_options(outfeed_mode=1))
    model.set_infeed_queue_options(prefetch_depth=2)
    model.set_outfeed_queue_options(buffer_depth=2)
    model.set_asynchronous_callbacks(True)
    model.set_replication_options(replicated_metric_reduction_method="MEAN")
    pipelined = dense_model("sequential")
    pipelined.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    pipelined.set_pipeline_stage_assignment([0])
    out["pipelined_without_ga"] = error(lambda: pipelined.fit(dataset(), epochs=1, verbose=0))

# strategy.run with a Keras model, infeed, outfeed, loops.repeat and a pipeline in a tf.function
with strategy.scope():
    model = dense_model("sequential")
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset().repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    last = ipu.ipu_outfeed_queue.IPUOutfeedQueue(outfeed_mode=ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)
    scoped = ipu.ipu_outfeed_queue.ScopedIPUOutfeedQueue()
    optimizer = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def training_loop():
        def body(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                          model.trainable_variables))
            return outfeed.enqueue(loss), last.enqueue({"loss": loss})
        ipu.loops.repeat(8, body, [], infeed)

    strategy.run(training_loop)
    out["loop_losses"] = outfeed.dequeue().numpy().tolist()
    out["loop_last"] = float(last.dequeue()["loss"].numpy())
    out["loop_w"] = model.get_weights()[0].ravel().tolist()

    @tf.function
    def count(n):
        x = tf.constant([1, 1], tf.int32)
        for _ in tf.range(n):
            scoped.enqueue(x)
            x += 1
    strategy.run(count, args=(10,))
    out["scoped_outfeed"] = [t.numpy().tolist() for t in scoped]
    out["iterate_last_error"] = error(lambda: iter(last))

    w1 = tf.Variable(np.eye(3, dtype=np.float32) * 0.5)
    w2 = tf.Variable(np.ones((3, 1), np.float32))
    pipe_opt = tf.keras.optimizers.SGD(0.1)
    pipe_in = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset())
    pipe_out = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    @tf.function
    def pipelined_step():
        def stage1(x, y):
            return tf.matmul(x, w1), y

        def stage2(h, y):
            return tf.reduce_mean((tf.matmul(h, w2) - y) ** 2)

        def optimizer_function(loss):
            return ipu.pipelining_ops.OptimizerFunctionOutput(pipe_opt, loss, variables=[w1, w2])
        ipu.pipelining_ops.pipeline([stage1, stage2], gradient_accumulation_count=4, repeat_count=2,
                                    infeed_queue=pipe_in, outfeed_queue=pipe_out,
                                    optimizer_function=optimizer_function,
                                    reduction_method="mean")
    strategy.run(pipelined_step)
    out["pipeline_tf2_losses"] = pipe_out.dequeue().numpy().tolist()
    out["pipeline_tf2_w2"] = w2.numpy().ravel().tolist()

    @tf.function
    def reduce_fn():
        return strategy.reduce("SUM", strategy.run(lambda: ipu.cross_replica_ops.cross_replica_sum(tf.constant(3.0))), axis=None)
    out["cross_replica_sum_one_replica"] = float(reduce_fn().numpy())
    out["gelu"] = ipu.nn_ops.gelu(tf.constant([-1.0, 0.5, 2.0])).numpy().tolist()

# Op modules at their flat module paths (tensorflow.python.ipu.nn_ops is ipu.ops.nn_ops)
import tensorflow.python.ipu.embedding_ops as flat_embedding_ops  # noqa: E402
import tensorflow.python.ipu.nn_ops as flat_nn_ops  # noqa: E402

out["flat_modules"] = [flat_nn_ops is ipu.ops.nn_ops, flat_embedding_ops is ipu.embedding_ops]
table = tf.reshape(tf.range(12.0), [4, 3])
out["embedding_lookup"] = ipu.embedding_ops.embedding_lookup(
    table, tf.constant([[3, 0], [1, 1]]), serialization_factor=2).numpy().tolist()
out["embedding_bad_factor"] = error(lambda: ipu.embedding_ops.embedding_lookup(
    table, tf.constant([0]), serialization_factor=3))
a = tf.constant(X[:4])
out["serialized_matmul"] = ipu.math_ops.serialized_matmul(
    a, tf.constant(W0.T), 3, "a_rows_b_columns", transpose_b=True).numpy().ravel().tolist()
out["serialized_matmul_bad_dim"] = error(lambda: ipu.math_ops.serialized_matmul(a, a, 2, "rows"))
out["segment_sum"] = ipu.math_ops.segment_sum(tf.constant([1.0, 2.0, 3.0, 4.0]),
                                              tf.constant([0, 0, 1, 2]), 3).numpy().tolist()
images = tf.stack([tf.fill([2, 2, 3], float(i)) for i in range(3)])
out["normalise_image"] = ipu.image_ops.normalise_image(
    images, np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32), scale=2).numpy().tolist()
out["normalise_image_uint8_dtype"] = ipu.image_ops.normalise_image(
    tf.zeros([1, 1, 3], tf.uint8), [0, 0, 0], [1, 1, 1]).dtype.name
out["normalise_image_two_channels"] = error(lambda: ipu.image_ops.normalise_image(
    tf.zeros([2, 2]), [1, 2, 3], [4, 5, 6]))
benchmark = ipu.dataset_benchmark.dataset_benchmark(
    tf.data.Dataset.from_tensors(tf.ones([4, 4])).repeat(10), 3, 100)
out["dataset_benchmark"] = json.loads(benchmark.numpy()[0])
out["dataset_benchmark_no_epochs"] = error(lambda: ipu.dataset_benchmark.dataset_benchmark(
    tf.data.Dataset.range(3), 0, 10))

with open(os.path.join(sys.argv[1], f"tf2-{out['instance']}.json"), "w") as f:
    json.dump(out, f)
