"""A plain MultiWorkerMirroredStrategy custom loop that works under any TF_CONFIG layout (workers
only, or a chief and workers): each instance trains on its shard and writes its final weights and
its TF_CONFIG task to OUT/mwms-<instance>.json.

Usage: mwms_weights.py OUT
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STEPS, LR = 3, 0.1
strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
with strategy.scope():
    w = tf.Variable(tf.zeros([4, 1]))
opt = tf.keras.optimizers.SGD(LR)
index = int(os.environ["POPDIST_INSTANCE_INDEX"])
n = strategy.num_replicas_in_sync
rng = np.random.default_rng(0)
x_all = rng.normal(size=(4 * n, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
x, y = x_all[index::n], y_all[index::n]


@tf.function
def step():
    def replica_fn():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.matmul(x, w) - y) ** 2) / len(x_all)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
    strategy.run(replica_fn)


for _ in range(STEPS):
    step()
with open(os.path.join(sys.argv[1], f"mwms-{index}.json"), "w") as f:
    json.dump({"w": w.numpy().ravel().tolist(), "replicas": n, "task_type": resolver.task_type,
               "task_id": resolver.task_id,
               "chief": bool(strategy.extended.should_checkpoint)}, f)
