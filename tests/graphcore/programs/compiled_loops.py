"""Training loops compiled with ``tf.function(jit_compile=True)``, written as Graphcore's TF2 user
guide writes them: ``next(iterator)`` in an on-device loop run with ``strategy.run`` (outfeed
drained by a thread while it trains), ``strategy.run`` inside a compiled loop over a
distributed dataset (called in and outside the strategy's scope), ``ipu.loops.repeat`` over an
IPUInfeedQueue (training, and read by each local replica), a dataset iterated inside the
compiled function, a Horovod collective inside one. Each loop also runs without
``jit_compile`` from the same start. A linear model, SGD 0.1, 8 steps of a global batch of 8
from X, Y (numpy.random.default_rng(0)). Writes OUT/compiled-<instance>.json.

usage: compiled_loops.py OUT_DIR ipu|popdist|multi-worker
"""
import json
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

STEPS, GLOBAL_BATCH, LR = 8, 8, 0.1
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 3)).astype("float32")
Y = rng.normal(size=(64, 1)).astype("float32")
W0 = rng.normal(size=(3, 1)).astype("float32")

cfg = ipu.config.IPUConfig()
cfg.auto_select_ipus = 1
if sys.argv[2] == "popdist":
    popdist.tensorflow.set_ipu_config(cfg, ipus_per_replica=1, configure_device=True)
    from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy
    strategy = PopDistStrategy()
elif sys.argv[2] == "multi-worker":  # TensorFlow collectives between the instances
    cfg.configure_ipu_system()
    strategy = ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1()
else:
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
instances, instance = popdist.getNumInstances(), popdist.getInstanceIndex()
local_replicas = popdist.getNumLocalReplicas()
per_replica = GLOBAL_BATCH // popdist.getNumTotalReplicas()


def instance_dataset():
    """This instance's batches: global batch s is instance i's elements s*L .. s*L+L-1 (one per
    local replica), as PopDistStrategy and a replicated infeed hand them to the replicas."""
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(per_replica, drop_remainder=True)
    return ds.shard(instances, instance)


def replica_loss(w, x, y):
    return tf.reduce_sum(tf.square(tf.matmul(x, w) - y)) / GLOBAL_BATCH


with strategy.scope():
    w = tf.Variable(W0)
    optimizer = tf.keras.optimizers.SGD(LR)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()


def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = replica_loss(w, x, y)
    optimizer.apply_gradients([(tape.gradient(loss, w), w)])
    return loss


def drained(queue):
    return np.asarray([np.asarray(v) for v in queue]).tolist()


def fresh_start():
    w.assign(W0)
    outfeed.deleter  # noqa: B018 (eager: forgets what earlier runs enqueued)


def guide_loop(jit):
    """targeting_tf2_example3 / outfeed_example: next(iterator) in the compiled loop, the loss
    enqueued, a thread drains the outfeed while the loop runs."""
    @tf.function(jit_compile=jit)
    def loop(iterator, steps):
        for _ in tf.range(steps):
            x, y = next(iterator)
            outfeed.enqueue(train_step(x, y))

    fresh_start()
    losses = []

    def reader():
        while len(losses) < STEPS:
            losses.extend(float(v) for v in outfeed)

    thread = threading.Thread(target=reader)
    thread.start()
    iterator = iter(instance_dataset())
    strategy.run(loop, args=(iterator, STEPS // 2))
    strategy.run(loop, args=(iterator, STEPS // 2))
    thread.join()
    return {"w": w.numpy().ravel().tolist(), "losses": losses}


def run_in_loop(jit, in_scope):
    """strategy.run inside a compiled loop over a distributed dataset; the outfeed has a
    replica axis when there are several local replicas."""
    @tf.function(jit_compile=jit)
    def loop(iterator):
        for _ in tf.range(STEPS):
            strategy.run(lambda x, y: outfeed.enqueue(train_step(x, y)), args=next(iterator))

    fresh_start()
    iterator = iter(strategy.experimental_distribute_dataset(instance_dataset()))
    if in_scope:
        with strategy.scope():
            loop(iterator)
    else:
        loop(iterator)
    return {"w": w.numpy().ravel().tolist(), "losses": outfeed.dequeue().numpy().tolist()}


def repeat_over_infeed(jit):
    """perf_training_example: loops.repeat over an IPUInfeedQueue, a dict enqueued."""
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(instance_dataset())

    def body(total, x, y):
        loss = train_step(x, y)
        outfeed.enqueue({"loss": loss, "rows": tf.shape(x)[0]})
        return total + loss

    @tf.function(jit_compile=jit)
    def program():
        return ipu.loops.repeat(STEPS, body, [0.0], infeed)

    fresh_start()
    total = strategy.run(program)
    out = outfeed.dequeue()
    return {"w": w.numpy().ravel().tolist(), "losses": out["loss"].numpy().tolist(),
            "rows": out["rows"].numpy().tolist(),
            "total": [float(t) for t in strategy.experimental_local_results(total)]}


def infeed_per_replica(jit):
    """loops.repeat over an IPUInfeedQueue run by every local replica: each replica reads its
    own elements (sums of x enqueued, sums of y carried)."""
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(instance_dataset())

    def body(total, x, y):
        outfeed.enqueue(tf.reduce_sum(x))
        return total + tf.reduce_sum(y)

    @tf.function(jit_compile=jit)
    def program():
        return ipu.loops.repeat(STEPS, body, [0.0], infeed)

    fresh_start()
    totals = strategy.experimental_local_results(strategy.run(program))
    return {"x_sums": outfeed.dequeue().numpy().tolist(), "y_sums": [float(t) for t in totals]}


def dataset_in_function(jit):
    """A dataset iterated by a for loop inside the compiled function."""
    @tf.function(jit_compile=jit)
    def epoch(dataset):
        total = 0.0
        for x, y in dataset:
            loss = train_step(x, y)
            outfeed.enqueue(loss)
            total += loss
        return total

    fresh_start()
    total = strategy.run(epoch, args=(instance_dataset(),))
    return {"w": w.numpy().ravel().tolist(), "losses": outfeed.dequeue().numpy().tolist(),
            "total": float(total)}


def collective_in_function(jit):
    @tf.function(jit_compile=jit)
    def summed():
        return ipu.distributed.allreduce(tf.constant(instance + 1.0), reduce_op="SUM")

    with strategy.scope():
        return float(summed())


def pure_function_outside_the_ipu_layer():
    """A compiled function that uses nothing of the IPU layer keeps TensorFlow's XLA: XLA
    refuses string tensors on a CPU, outside the strategy; run by the strategy it runs."""
    def length(text):
        return tf.strings.length(text)

    word = tf.constant("abcd")
    try:
        tf.function(length, jit_compile=True)(word)
        outside = "ran"
    except tf.errors.InvalidArgumentError as exc:
        outside = "XLA refused" if "XLA_CPU_JIT" in str(exc) else str(exc)
    inside = strategy.run(tf.function(length, jit_compile=True), args=(word,))
    return {"outside": outside, "inside": int(strategy.experimental_local_results(inside)[0])}


result = {"strategy": sys.argv[2], "instances": instances, "local_replicas": local_replicas}
for jit in (True, False):
    key = "jit" if jit else "plain"
    if local_replicas == 1:
        # Several local replicas: one iterator has no order among them, and TensorFlow's
        # replica threads cannot reduce gradients inside a loop (docs/ipu-programs.md,
        # 'Compiled loops and outfeeds').
        result[f"guide_loop_{key}"] = guide_loop(jit)
        result[f"dataset_in_function_{key}"] = dataset_in_function(jit)
        result[f"repeat_over_infeed_{key}"] = repeat_over_infeed(jit)
    if sys.argv[2] != "multi-worker":  # it shards distributed datasets itself
        result[f"run_in_loop_scope_{key}"] = run_in_loop(jit, in_scope=True)
        result[f"run_in_loop_outside_{key}"] = run_in_loop(jit, in_scope=False)
    result[f"infeed_per_replica_{key}"] = infeed_per_replica(jit)
    result[f"collective_{key}"] = collective_in_function(jit)
result["pure"] = pure_function_outside_the_ipu_layer()

with open(os.path.join(sys.argv[1], f"compiled-{instance}.json"), "w") as f:
    json.dump(result, f)
