"""Checks of the IPU API across instances (run under poprun-lite): cross-replica ops under
PopDistStrategy, Keras gradient accumulation under PopDistStrategy, and a TF1 loop with
CrossReplicaGradientAccumulationOptimizerV2, each instance on its own shard of the data
(``dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())``, as Graphcore's
documentation tells programs to). Writes OUT/dist-<instance>.json.

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

local_batch = 8 // N
data = shard(tf.data.Dataset.from_tensor_slices((X, Y))).batch(local_batch, drop_remainder=True)
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

# IPUStrategy with 2 local IPUs would replicate on Graphcore's machines: refused, not mistrained.
with ipu.ipu_strategy.IPUStrategyV1().scope():
    single = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    single.compile(optimizer="sgd", loss="mse")
    try:
        single.fit(X, Y, batch_size=4, epochs=1, verbose=0)
        out["ipu_strategy_replication"] = None
    except ValueError as exc:
        out["ipu_strategy_replication"] = str(exc)
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
