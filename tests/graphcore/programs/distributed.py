"""Checks of the IPU API across instances (run under poprun-lite with 2 replicas per instance):
cross-replica ops under PopDistStrategy, Keras gradient accumulation under PopDistStrategy, and
a TF1 loop with CrossReplicaGradientAccumulationOptimizerV2, each instance on its own shard of
the data (``dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())``, as
Graphcore's documentation tells programs to); and IPUStrategy replicated over each instance's 2
local IPUs (Keras fit / evaluate / predict, gradient accumulation, outfeeds with a replica axis,
cross-replica ops), each instance on its own. Writes OUT/dist-<instance>.json.

usage: distributed.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.distributed import popdist_strategy  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out_dir = sys.argv[1]
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 3)).astype("float32")
Y = rng.normal(size=(64, 1)).astype("float32")
W0 = rng.normal(size=(3, 1)).astype("float32")
N, I = popdist.getNumInstances(), popdist.getInstanceIndex()
out = {"instance": I, "instances": N}

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
config.configure_ipu_system()


def shard(ds):
    return ds.shard(N, I)


# TF2: PopDistStrategy, cross-replica ops, Keras fit with gradient accumulation
strategy = popdist_strategy.PopDistStrategy()
out["replicas"] = strategy.num_replicas_in_sync


@tf.function
def sums():
    def fn():
        rid = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        return (ipu.cross_replica_ops.cross_replica_sum(rid + 1.0),
                ipu.cross_replica_ops.cross_replica_mean(rid + 1.0))
    return strategy.run(fn)


s, m = sums()
out["cross_replica_sum"] = [float(t) for t in strategy.experimental_local_results(s)]
out["cross_replica_mean"] = [float(t) for t in strategy.experimental_local_results(m)]

# Batches per replica: each replica reads its own, so a step trains on 8 samples over all replicas.
replica_batch = 8 // popdist.getNumTotalReplicas()
data = shard(tf.data.Dataset.from_tensor_slices((X, Y))).batch(replica_batch, drop_remainder=True)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(
        1, use_bias=False, kernel_initializer=tf.constant_initializer(W0), input_shape=(3,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse",
                  steps_per_execution=4)
    model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=4,
                                            gradient_accumulation_reduction_method="mean")
    model.fit(data, epochs=2, verbose=0)
out["keras_ga_w"] = model.get_weights()[0].ravel().tolist()
out["keras_ga_iterations"] = int(model.optimizer.iterations.numpy())

# IPUStrategy over this instance's 2 local IPUs replicates, as Graphcore's: each replica reads
# its own batches, gradients are summed over the replicas; each instance trains on its own.
replicated = ipu.ipu_strategy.IPUStrategyV1()
out["ipu_num_replicas_in_sync"] = replicated.num_replicas_in_sync


def dense():
    return tf.keras.Sequential([tf.keras.layers.Dense(
        1, use_bias=False, kernel_initializer=tf.constant_initializer(W0), input_shape=(3,))])


def batches():
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)


with replicated.scope():
    model = dense()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse",
                  steps_per_execution=4)
    history = model.fit(batches(), epochs=2, verbose=0)
    out["ipu_fit"] = {"w": model.get_weights()[0].ravel().tolist(),
                      "iterations": int(model.optimizer.iterations.numpy()),
                      "loss": history.history["loss"],
                      "evaluate": model.evaluate(batches(), verbose=0),
                      "predict": model.predict(X[:8], batch_size=2, verbose=0).ravel().tolist()}
    arrays = dense()
    arrays.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse",
                   steps_per_execution=4)
    arrays.fit(X, Y, batch_size=4, epochs=2, verbose=0, shuffle=False)
    out["ipu_fit_arrays_w"] = arrays.get_weights()[0].ravel().tolist()
    accumulated = dense()
    accumulated.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse",
                        steps_per_execution=4)
    accumulated.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2,
                                                  gradient_accumulation_reduction_method="mean")
    accumulated.fit(batches(), epochs=2, verbose=0)
    out["ipu_ga"] = {"w": accumulated.get_weights()[0].ravel().tolist(),
                     "iterations": int(accumulated.optimizer.iterations.numpy())}
    pipelined = dense()
    pipelined.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    pipelined.set_pipelining_options(gradient_accumulation_steps_per_replica=2, device_mapping=[1])
    try:
        pipelined.fit(batches(), epochs=1, verbose=0)
        out["ipu_pipelined_over_replicas"] = None
    except ValueError as exc:
        out["ipu_pipelined_over_replicas"] = str(exc)

# Outfeeds enqueued by several local replicas gain a replica axis; cross-replica ops reduce over
# the IPUStrategy's local replicas.
all_feed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
last_feed = ipu.ipu_outfeed_queue.IPUOutfeedQueue(
    outfeed_mode=ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)


@tf.function
def replicated_loop():
    def fn():
        rid = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        for i in tf.range(3):
            all_feed.enqueue({"value": rid * 10.0 + tf.cast(i, tf.float32),
                              "row": tf.fill([2], rid)})
            last_feed.enqueue(rid + tf.cast(i, tf.float32))
        return ipu.cross_replica_ops.cross_replica_sum(rid + 1.0)
    return replicated.run(fn)


sums_local = replicated_loop()
out["ipu_cross_replica_sum"] = [float(t) for t in replicated.experimental_local_results(sums_local)]
fed = all_feed.dequeue()
out["outfeed_all"] = fed["value"].numpy().tolist()
out["outfeed_all_row_shape"] = list(fed["row"].shape)
out["outfeed_last"] = last_feed.dequeue().numpy().tolist()
# TF1: a graph, a loops.repeat training loop and a Session
with tf.Graph().as_default():
    data = shard(tf.data.Dataset.from_tensor_slices((X, Y))).batch(8 // N, drop_remainder=True)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(data)

    def body(x, y):
        w = tf.compat.v1.get_variable("w", initializer=W0, use_resource=True)
        loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt = ipu.optimizers.CrossReplicaGradientAccumulationOptimizerV2(
            tf.compat.v1.train.GradientDescentOptimizer(0.05), 4,
            reduction_method=ipu.gradient_accumulation.GradientAccumulationReductionMethod.SUM)
        return opt.minimize(loss)

    with ipu.scopes.ipu_scope("/device:IPU:0"):
        loop = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(8, body, [], infeed))
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(loop)
        out["tf1_ga_w"] = sess.run(tf.compat.v1.trainable_variables()[0]).ravel().tolist()

with open(os.path.join(out_dir, f"dist-{I}.json"), "w") as f:
    json.dump(out, f)
