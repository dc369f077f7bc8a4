"""Horovod's elastic Keras example (examples/elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py
in horovod/horovod), step by step as it runs: the same model, optimizer (Adam at 0.001 x size,
DistributedOptimizer), one-step ``fit`` before ``KerasState``, reset callback (learning rate,
one-step ``fit``), three elastic callbacks, rank 0's ModelCheckpoint and ``@hvd.elastic.run``
``fit``. What differs: the images are scikit-learn's 8x8 digits (MNIST cannot be downloaded
here), the checkpoints go to OUT_DIR, and the epochs and steps are arguments.

usage: elastic_keras_example.py OUT_DIR [EPOCHS [STEPS]]   (defaults: 5, 24 // size per epoch)
environment: ELASTIC_STEP_SLEEP  seconds to sleep after each step (default 0)

Writes OUT_DIR/pid-<pid> ("<rank> <host>") at start, OUT_DIR/epochs.jsonl (rank 0, one line per
epoch, before its commit: {"epoch", "size", "host"}) and OUT_DIR/final-<rank>.json (the model's and
optimizer's variables, epoch, size) at the end.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

out = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 24
step_sleep = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))
host = os.environ.get("HOROVOD_HOSTNAME", "")

hvd.init()
with open(os.path.join(out, f"pid-{os.getpid()}"), "w") as f:
    f.write(f"{hvd.rank()} {host}")

digits = load_digits()
images, labels = digits.images / 16.0, digits.target
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(images[..., tf.newaxis], tf.float32), tf.cast(labels, tf.int64)))
dataset = dataset.repeat().shuffle(2000).batch(32)

model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
    tf.keras.layers.Conv2D(64, [3, 3], activation="relu"),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Dropout(0.25),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10, activation="softmax"),
])
opt = hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size()),
                               backward_passes_per_step=1, average_aggregated_gradients=True)
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt,
              metrics=["accuracy"], experimental_run_tf_function=False)
model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None, verbose=0)

state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def on_state_reset():
    tf.keras.backend.set_value(state.model.optimizer.lr, 0.001 * hvd.size())
    state.model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None, verbose=0)


state.register_reset_callbacks([on_state_reset])


class EpochLog(tf.keras.callbacks.Callback):
    """Rank 0: one line per epoch (the test reads it), just before the commit that saves it."""

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            with open(os.path.join(out, "epochs.jsonl"), "a") as f:
                f.write(json.dumps({"epoch": state.epoch - 1, "size": hvd.size(),
                                    "host": host}) + "\n")

    def on_train_batch_end(self, batch, logs=None):
        if step_sleep:
            time.sleep(step_sleep)


callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state),
             EpochLog(), hvd.elastic.CommitStateCallback(state)]
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(
        os.path.join(out, "checkpoint-{epoch}.weights.h5"), save_weights_only=True))


@hvd.elastic.run
def train(state):
    state.model.fit(dataset, steps_per_epoch=steps // hvd.size(), epochs=epochs - state.epoch,
                    callbacks=callbacks, verbose=0)


train(state)
variables = [np.asarray(v.numpy()).ravel().tolist()
             for v in list(model.variables) + list(model.optimizer.variables())]
with open(os.path.join(out, f"final-{hvd.rank()}.json"), "w") as f:
    json.dump({"variables": variables, "optimizer_variables": len(model.optimizer.variables()),
               "epoch": state.epoch, "size": hvd.size()}, f)
