"""Plain TensorFlow MultiWorkerMirroredStrategy on the launcher's TF_CONFIG: the ports must work."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable(tf.zeros([4, 1]))
opt = tf.keras.optimizers.SGD(0.1)
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
rng = np.random.default_rng(0)
x_all = rng.normal(size=(8, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
n = strategy.num_replicas_in_sync
x, y = x_all[task::n], y_all[task::n]


@tf.function
def step():
    def replica_fn():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.matmul(x, w) - y) ** 2) / len(x_all)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
    strategy.run(replica_fn)


for _ in range(5):
    step()
with open(os.path.join(sys.argv[1], f"mwms-{task}.json"), "w") as f:
    json.dump({"w": w.numpy().ravel().tolist(), "replicas": n}, f)
