"""One process, several replicas, as Graphcore's IPU system replicates a program over the IPUs
IPUConfig selects (graphcore/tensorflow tests: all_gather_test, reduce_scatter_test,
popops_cross_replica_mean_test, replicated_graph_test, replication_all_to_all_test,
ipu_strategy_replicated_test): TF1 ``ipu_compiler.compile`` programs with
``auto_select_ipus = N``, configured before the graph is built or after it, and an IPUStrategy's
``run``. Each case runs in a graph of its own; the results go to OUT_DIR/replication.json.

usage: one_process_replication.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.compiler.plugin.poplar.ops import gen_popops_ops, gen_poputil_ops  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

out = {}


def configure(ipus):
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = ipus
    cfg.configure_ipu_system()


def case(function):
    """Run ``function`` in a TF1 graph of its own; its result is out[its name]."""
    with tf.Graph().as_default():
        out[function.__name__] = function()
    return function


def run(*fetches, feed=None, init_feeds=()):
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for infeed in init_feeds:
            sess.run(infeed.initializer)
        return [sess.run(f, feed) for f in fetches]


def listed(value):
    if isinstance(value, dict):
        return {k: listed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [listed(v) for v in value]
    return np.asarray(value).tolist()


# ---- configured first: all_gather_test, reduce_scatter_test, popops_cross_replica_mean_test --
@case
def all_gather_inputs():
    configure(4)
    data = np.arange(4 * 32, dtype=np.float32)  # a [4, 8] batch per replica
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(
        tf.data.Dataset.from_tensor_slices(data).batch(8, drop_remainder=True)
        .batch(4, drop_remainder=True))

    def net():
        return ipu.all_to_all_op.all_gather(tf.unstack(infeed._dequeue(), axis=0), 4)
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(net)
    return listed(run(res, init_feeds=[infeed])[0])


@case
def reduce_scatter_mixed_dtypes():
    configure(4)
    data = np.random.default_rng(seed=123).integers(0, 100, dtype=np.int32, size=[4 * 32 * 2])
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(  # a [2 inputs, 32] batch per replica
        tf.data.Dataset.from_tensor_slices(data).batch(32, drop_remainder=True)
        .batch(2, drop_remainder=True))

    def net():
        x1, x2 = tf.unstack(infeed._dequeue(), axis=0)
        x1, x2 = ipu.reduce_scatter_op.reduce_scatter([x1, tf.cast(x2, tf.float16)], 4,
                                                      "COLLECTIVE_OP_ADD")
        return ipu.all_to_all_op.all_gather([x1, x2], 4)
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(net)
    first, second = run(res, init_feeds=[infeed])[0]
    return {"data": data.tolist(), "values": listed([first, second]),
            "dtypes": [first.dtype.name, second.dtype.name]}


def mean_over_replicas(rows, replica_group_size):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(rows))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def body(x):
        return outfeed.enqueue(ipu.cross_replica_ops.cross_replica_mean(x, replica_group_size))
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(1, body, [], infeed))
    dequeued = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(res)
        return listed(sess.run(dequeued)[0])


@case
def cross_replica_mean_all():
    configure(4)
    return {"zero": mean_over_replicas(np.arange(16, dtype=np.float32).reshape(4, 4), 0),
            "none": mean_over_replicas(np.arange(16, dtype=np.float32).reshape(4, 4), None),
            "half_max": mean_over_replicas(np.full([4, 4], 65504, np.float16), 0)}


@case
def cross_replica_groups():
    configure(4)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def net():
        x = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
        return outfeed.enqueue({"sum_2": ipu.cross_replica_ops.cross_replica_sum(x, 2),
                                "mean_2": ipu.cross_replica_ops.cross_replica_mean(x, 2),
                                "sum_all": ipu.cross_replica_ops.cross_replica_sum(x)})
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(net)
    dequeued = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(res)
        return {k: v[0] for k, v in listed(sess.run(dequeued)).items()}


@case
def initializer_taken_first():
    configure(2)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.range(6))
    start = infeed.initializer  # taken before the program (and its replicas' iterators) exist
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(
            lambda: ipu.loops.repeat(3, outfeed.enqueue, infeed_queue=infeed))
    dequeued = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(start)
        sess.run(res)
        return listed(sess.run(dequeued))


# ---- configured after the graph is built: replicated_graph_test ------------------------------
@case
def sum_of_two_replicas():
    inp = tf.compat.v1.placeholder(np.float32, [4])

    def graph(x):
        with tf.device("/device:IPU:0"):
            return [ipu.cross_replica_ops.cross_replica_sum(x + x)]
    res = ipu.ipu_compiler.compile(graph, [inp])
    configure(2)
    return listed(run(res, feed={inp: np.ones([4])})[0])


@case
def loss_and_gradient():
    inp = tf.compat.v1.placeholder(np.float32, [4])

    def graph(x):
        with tf.device("/device:IPU:0"):
            with tf.compat.v1.variable_scope("", use_resource=True):
                b = tf.compat.v1.get_variable("b", shape=[4], dtype=np.float32,
                                              initializer=tf.compat.v1.constant_initializer(3))
            loss = ipu.cross_replica_ops.cross_replica_sum(x + b)
            return [loss, tf.gradients(loss, b)]
    res = ipu.ipu_compiler.compile(graph, [inp])
    configure(2)
    loss, grad = run(res, feed={inp: np.ones([4])})[0]
    return {"loss": listed(loss), "grad": listed(grad),
            "variables": [v.name for v in tf.compat.v1.global_variables()]}


@case
def infeed_outfeed_loop():
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(
        tf.data.Dataset.range(3).map(lambda i: tf.fill([2], tf.cast(i, tf.float32))).repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def body(v, x):
        total = ipu.cross_replica_ops.cross_replica_sum(v + x)
        return total, outfeed.enqueue({"last": v, "this": total})

    def net():
        return ipu.loops.repeat(5, body, [tf.zeros([2])], infeed)
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(net)
    dequeued = outfeed.dequeue()  # taken before the IPU system is configured
    configure(2)
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        result = sess.run(res)
        return {"result": listed(result), "outfeed": listed(sess.run(dequeued))}


@case
def no_collective():
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices([1, 2, 3, 4]))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(
            lambda: ipu.loops.repeat(2, outfeed.enqueue, infeed_queue=infeed))
    dequeued = outfeed.dequeue()
    configure(2)
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(res)
        return listed(sess.run(dequeued))


# ---- TF1's batch normalization module, as Graphcore's TF1 tests import it -------------------
@case
def tf1_batch_normalization():
    from tensorflow.python.layers import normalization  # tf_keras's legacy layers
    x = tf.compat.v1.placeholder(np.float32, [4, 2])

    def graph(inputs):
        return [normalization.batch_normalization(inputs, momentum=0.5, training=True)]
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(graph, [x])
    configure(1)
    moving_mean = [v for v in tf.compat.v1.global_variables() if "moving_mean" in v.name][0]
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        normalized = sess.run(res, {x: data})[0]
        return {"normalized": listed(normalized), "moving_mean": listed(sess.run(moving_mean))}


# ---- Graphcore's generated ops: replication_all_to_all_test ---------------------------------
IDX = [1, 2, 3, 4, 1, 2, 3, 4, 0, 5, 6, 7, 1, 1, 1, 7]


@case
def generated_ops():
    x = tf.compat.v1.placeholder(np.float32, [8])
    idx = tf.compat.v1.placeholder(np.int32, [16])
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    shape = gen_popops_ops.ipu_all_gather([tf.zeros([2, 4])], replication_factor=8)[0].shape

    def graph(x, idx):
        with tf.device("/device:IPU:0"):
            index = tf.cast(ipu.replication_ops.replication_index(), np.float32)
            gathered, = gen_popops_ops.ipu_all_gather([x + index], replication_factor=8)
            swapped = gen_popops_ops.ipu_all_to_all(x + 8 * index, 0, 0, 8)
            updated = gen_popops_ops.ipu_multi_update_add(
                tf.zeros([8, 2]), indices=idx, updates=tf.ones([16, 2]), scale=2.0)
            mean = gen_poputil_ops.ipu_replication_normalise(
                gen_popops_ops.ipu_cross_replica_sum(updated))
            return outfeed.enqueue({"gathered": gathered, "swapped": swapped, "mean": mean})
    res = ipu.ipu_compiler.compile(graph, [x, idx])
    configure(8)
    dequeued = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(res, {x: np.arange(1, 9), idx: IDX})
        result = {k: v[0] for k, v in listed(sess.run(dequeued)).items()}
    result["shape_outside_a_program"] = shape.as_list()
    return result


# ---- training: each replica its own copy of the variables, read back from replica 0 --------
X = np.arange(12, dtype=np.float32).reshape(6, 2) / 10


def train(optimizer, configure_first):
    if configure_first:
        configure(2)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X))

    def body(x):
        w = tf.compat.v1.get_variable("w", shape=[2], use_resource=True,
                                      initializer=tf.compat.v1.constant_initializer([1.0, -1.0]))
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if optimizer == "cross_replica":
            opt = ipu.optimizers.CrossReplicaOptimizer(opt)
        loss = tf.reduce_sum(tf.square(w * x)) / 2
        return opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(3, body, [], infeed))
    if not configure_first:
        configure(2)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(infeed.initializer)
        sess.run(res)
        return {"w": listed(sess.run(tf.compat.v1.trainable_variables()[0])),
                "global_step": int(sess.run(tf.compat.v1.train.get_global_step())),
                "variables": [v.name for v in tf.compat.v1.global_variables()]}


for optimizer in ("cross_replica", "plain"):
    for first in (True, False):
        with tf.Graph().as_default():
            out[f"train_{optimizer}_{'first' if first else 'after'}"] = train(optimizer, first)


# ---- a pipeline spans its stages' IPUs: 2 stages on 2 IPUs are 1 replica, on 4 IPUs 2 -------
def pipeline(ipus):
    configure(ipus)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(
        tf.data.Dataset.from_tensor_slices(np.ones([8, 2], np.float32)).batch(1, drop_remainder=True))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def stage1(x):
        return x * 2

    def stage2(x):
        return tf.reduce_sum(x) + tf.cast(ipu.replication_ops.replication_index(), tf.float32)
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(lambda: ipu.pipelining_ops.pipeline(
            [stage1, stage2], gradient_accumulation_count=2, infeed_queue=infeed,
            outfeed_queue=outfeed, device_mapping=[0, 1]))
    dequeued = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(res)
        return listed(sess.run(dequeued))


for ipus in (2, 4):
    with tf.Graph().as_default():
        out[f"pipeline_on_{ipus}_ipus"] = pipeline(ipus)


# ---- a factor the configured replicas cannot make fails when the program runs ---------------
with tf.Graph().as_default():
    res = ipu.ipu_compiler.compile(lambda: ipu.all_to_all_op.all_gather(tf.ones([2]), 4))
    configure(2)
    with tf.compat.v1.Session() as sess:
        try:
            sess.run(res)
            out["unmet_factor"] = None
        except tf.errors.InvalidArgumentError as exc:
            out["unmet_factor"] = exc.message

# ---- IPUStrategy (TF2): run returns replica 0's value, as Graphcore's ------------------------
configure(2)
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    def all_reduce(op):
        @tf.function(jit_compile=True)
        def fn():
            x = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
            return tf.distribute.get_replica_context().all_reduce(op, x)
        return fn
    summed = strategy.run(all_reduce(tf.distribute.ReduceOp.SUM))
    mean = strategy.run(all_reduce(tf.distribute.ReduceOp.MEAN))
    index = strategy.run(tf.function(lambda: ipu.replication_ops.replication_index()))
    out["strategy"] = {"sum": float(summed.numpy()), "mean": float(mean.numpy()),
                       "index": int(index.numpy()), "type": type(summed).__name__,
                       "reduced": float(strategy.reduce(tf.distribute.ReduceOp.SUM, summed,
                                                        axis=None))}

with open(os.path.join(sys.argv[1], "replication.json"), "w") as f:
    json.dump(out, f)
