"""A Keras ``fit`` under PopDistStrategy that checkpoints every epoch to a shared folder and
resumes from it when started again: the elastic-restart Keras program.

usage: elastic_keras_popdist.py CKPT_DIR OUT_DIR EPOCHS [KILL_AT_EPOCH KILLED]
Every step's global batch is the same 12 rows of elastic_estimator.py (instance i of n takes its
12/n), two steps an epoch, so the final weights are elastic_estimator.reference(2 * EPOCHS)
whatever n is. On the first attempt the instances in the comma-separated KILLED kill themselves
with SIGKILL at the end of epoch KILL_AT_EPOCH. Instance 0 saves the checkpoints and writes
OUT_DIR/final.json.
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher.strategies import PopDistStrategy  # noqa: E402
from elastic_estimator import LR, ROWS, W0, X, Y  # noqa: E402

STEPS_PER_EPOCH = 2
ckpt_dir, out_dir, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
kill_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1
killed = [int(i) for i in sys.argv[5].split(",")] if len(sys.argv) > 5 else []
ctx = popdist_launcher.init()
n, i = ctx.num_instances, ctx.instance_index

strategy = PopDistStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((X.shape[1],)), tf.keras.layers.Dense(
        1, kernel_initializer=tf.constant_initializer(W0), bias_initializer="zeros")])
    model.compile(tf.keras.optimizers.SGD(LR), loss="mse")
    done_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epochs=done_epochs)
manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=2)
# The save counter is a variable created at the first save, inside fit's strategy scope, where
# creating a variable is collective (its initial value is broadcast from instance 0): every
# instance creates it here, so that instance 0 alone can save.
checkpoint.save_counter  # noqa: B018
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).expect_partial()
resumed_at = int(done_epochs.numpy())


class SaveEveryEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        done_epochs.assign(epoch + 1)
        if i == 0:
            manager.save(checkpoint_number=epoch + 1)
        if ctx.restart_count == 0 and i in killed and epoch + 1 >= kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


data = tf.data.Dataset.from_tensor_slices((X, Y)).shard(n, i).batch(ROWS // n).repeat()
model.fit(data, epochs=epochs, initial_epoch=resumed_at, steps_per_epoch=STEPS_PER_EPOCH,
          callbacks=[SaveEveryEpoch()], verbose=0)
if i == 0:
    kernel, bias = model.layers[-1].get_weights()
    with open(os.path.join(out_dir, "final.json"), "w") as f:
        json.dump({"w": kernel.ravel().tolist(), "b": float(bias[0]),
                   "epochs": int(done_epochs.numpy()), "resumed_at": resumed_at,
                   "attempt": ctx.restart_count, "num_instances": n}, f)
