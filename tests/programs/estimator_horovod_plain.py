"""A plain tf.estimator + Horovod program written for horovodrun (no distribution strategy, no
TF_CONFIG): hvd.init(), gradients averaged by hvd.DistributedOptimizer, initial values broadcast
from rank 0, model_dir on rank 0 only. Writes each rank's final weights to OUT/hvd-est-<rank>.json.

Usage: estimator_horovod_plain.py OUT
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STEPS, BATCH, LR = 4, 4, 0.1

hvd.init()
rank, size = hvd.rank(), hvd.size()
rng = np.random.default_rng(0)
x_all = rng.normal(size=(8 * size, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")


def model_fn(features, labels, mode):
    # rank r starts at r: only the broadcast from rank 0 makes every rank start at 0
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(
        float(rank)))
    loss = tf.reduce_mean((tf.matmul(features, w) - labels) ** 2)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR))
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn():
    shard = (x_all[rank::size], y_all[rank::size])
    return tf.data.Dataset.from_tensor_slices(shard).repeat().batch(BATCH)


out = sys.argv[1]
config = tf.estimator.RunConfig(model_dir=os.path.join(out, "model") if rank == 0 else None)
estimator = tf.estimator.Estimator(model_fn, config=config)
estimator.train(input_fn, steps=STEPS, hooks=[hvd.BroadcastGlobalVariablesHook(0)])
with open(os.path.join(out, f"hvd-est-{rank}.json"), "w") as f:
    json.dump({"w": estimator.get_variable_value("w").ravel().tolist(), "size": size}, f)
print(f"rank {rank} of {size}: trained {STEPS} steps", flush=True)
