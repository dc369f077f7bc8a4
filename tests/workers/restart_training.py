"""A PopDistStrategy custom loop that checkpoints every step and resumes from the latest
checkpoint; its input is a deterministic function of the step, so an interrupted and resumed run
must end with the weights of an uninterrupted one.

usage: restart_training.py OUT_DIR CKPT_DIR STEPS [KILL_AT_STEP [KILLED]]
On the first attempt (POPRUN_RESTART_COUNT=0) instance 1 (or each instance of the comma-separated
KILLED) kills itself with SIGKILL when it reaches KILL_AT_STEP. The global batch stays 8 whatever
the number of instances. Writes OUT_DIR/final-<i>.json: weights, the step it resumed at, the
attempt, the number of instances.
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher.strategies import PopDistStrategy  # noqa: E402

out_dir, ckpt_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
kill_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1
killed = [int(i) for i in sys.argv[5].split(",")] if len(sys.argv) > 5 else [1]
GLOBAL_BATCH, FEATURES, LR = 8, 4, 0.05
ctx = popdist_launcher.init()
strategy = PopDistStrategy()


def batch(step):
    rng = np.random.default_rng(1000 + step)  # the data of a step never depends on history
    x = rng.normal(size=(GLOBAL_BATCH, FEATURES)).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) * 0.5 + 0.1).astype("float32")


with strategy.scope():
    w = tf.Variable(np.full((FEATURES, 1), 0.2, "float32"))
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    opt = tf.keras.optimizers.SGD(LR)
checkpoint = tf.train.Checkpoint(w=w, step=step_var)
manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=3)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).expect_partial()
resumed_at = int(step_var.numpy())


@tf.function
def train_step(x, y):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_sum((tf.matmul(x, w) - y) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
    strategy.run(replica_fn, args=(x, y))


per_instance = GLOBAL_BATCH // ctx.num_instances
lo = ctx.instance_index * per_instance
for step in range(resumed_at, steps):
    if step == kill_at and ctx.restart_count == 0 and ctx.instance_index in killed:
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = batch(step)
    train_step(tf.constant(x[lo:lo + per_instance]), tf.constant(y[lo:lo + per_instance]))
    step_var.assign(step + 1)
    if ctx.instance_index == 0:
        manager.save(checkpoint_number=step + 1)

with open(os.path.join(out_dir, f"final-{ctx.instance_index}.json"), "w") as f:
    json.dump({"w": w.numpy().ravel().tolist(), "resumed_at": resumed_at,
               "attempt": ctx.restart_count, "num_instances": ctx.num_instances}, f)
