"""Horovod's elastic Keras pattern as its docs write it, with nothing added for a new worker:
``hvd.elastic.KerasState(model, batch=0, epoch=0)`` built before any step (the optimizer has no
variables yet), Horovod's batch, epoch and commit callbacks, ``@hvd.elastic.run`` around ``fit``.

usage: elastic_keras_unedited.py OUT_DIR adam|legacy-sgd [EPOCHS [STEPS_PER_EPOCH]]  (6, 8)
environment: ELASTIC_STEP_SLEEP  seconds to sleep after each step (default 0)

A small dense network on generated data (numpy.random.default_rng(7)). Each worker writes
OUT_DIR/pid-<pid> ("<rank> <host>") when it starts; rank 0 appends one JSON line to
OUT_DIR/epochs.jsonl before each epoch's commit ({"epoch", "size", "host"}); every worker writes
OUT_DIR/final-<rank>.json at the end: its model's and optimizer's variables, epoch, size.
"""
import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402

out = sys.argv[1]
which = sys.argv[2]
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 6
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 8
step_sleep = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))
host = socket.gethostname()

hvd.init()
with open(os.path.join(out, f"pid-{os.getpid()}"), "w") as f:
    f.write(f"{hvd.rank()} {os.environ.get('HOROVOD_HOSTNAME', host)}")

rng = np.random.default_rng(7)
x = rng.normal(size=(256, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.1 * rng.normal(size=(256, 1))).astype("float32")

model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
if which == "adam":
    optimizer = tf.keras.optimizers.Adam(0.01)
else:
    optimizer = tf.keras.optimizers.legacy.SGD(0.01, momentum=0.9)
model.compile(loss="mse", optimizer=hvd.DistributedOptimizer(optimizer))
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


class EpochLog(tf.keras.callbacks.Callback):
    """Rank 0: one line per epoch, just before the commit that saves it."""

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            with open(os.path.join(out, "epochs.jsonl"), "a") as f:
                f.write(json.dumps({"epoch": state.epoch - 1, "size": hvd.size(),
                                    "host": os.environ.get("HOROVOD_HOSTNAME", host)}) + "\n")

    def on_train_batch_end(self, batch, logs=None):
        if step_sleep:
            time.sleep(step_sleep)


callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state),
             EpochLog(), hvd.elastic.CommitStateCallback(state)]


@hvd.elastic.run
def train(state):
    part = slice(hvd.rank() * 32 // hvd.size(), (hvd.rank() + 1) * 32 // hvd.size())
    dataset = tf.data.Dataset.from_tensors((x[part], y[part])).repeat()
    state.model.fit(dataset, steps_per_epoch=steps, epochs=epochs - state.epoch,
                    callbacks=callbacks, verbose=0)


train(state)
optimizer_variables = model.optimizer.variables()
variables = [np.asarray(v.numpy()).ravel().tolist()
             for v in list(model.variables) + list(optimizer_variables)]
with open(os.path.join(out, f"final-{hvd.rank()}.json"), "w") as f:
    json.dump({"variables": variables, "optimizer_variables": len(optimizer_variables),
               "epoch": state.epoch, "size": hvd.size()}, f)
