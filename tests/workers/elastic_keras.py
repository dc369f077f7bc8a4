"""A Horovod elastic Keras ``fit``, written as for ``horovodrun`` elastic (plain Horovod API):
KerasState with Horovod's commit, batch and epoch callbacks and one that counts the steps.

usage: elastic_keras.py OUT_JSON [EPOCHS [STEPS_PER_EPOCH [COMMIT_EVERY]]]   (defaults: 3, 10, 4)
environment: ELASTIC_PID_DIR  each worker writes its pid to <dir>/pid-<hostname>-<pid>
             ELASTIC_STEP_SLEEP  seconds to sleep after each step (default 0)

Every step trains on global batch 0 of elastic_reference.py, split across the ranks. Keras
resumes an interrupted epoch only approximately, so the number of steps depends on the history;
the step counter is part of the committed state, so the final weights equal
elastic_reference.keras_reference(step) for the final ``step`` (>= EPOCHS * STEPS_PER_EPOCH), and
the final ``epoch`` is EPOCHS.
Rank 0 prints ``step <n> size <s> t=<time.time()>`` after each step and ``committed <n>`` at each
commit; every worker prints ``reset rank <r> size <s> host <h> t=<time>`` after a reset and
``done rank <r> size <s> step <n>`` at the end. The final rank 0 writes OUT_JSON: kernel, bias,
step, epoch, size, host, and its own resets and steps run.
"""
import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402

from elastic_reference import FEATURES, INITIAL_BIAS, INITIAL_KERNEL, LR, data, rows  # noqa: E402

out_path = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
steps_per_epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 10
commit_every = int(sys.argv[4]) if len(sys.argv) > 4 else 4
step_sleep = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))
host = socket.gethostname()
if os.environ.get("ELASTIC_PID_DIR"):
    with open(os.path.join(os.environ["ELASTIC_PID_DIR"], f"pid-{host}-{os.getpid()}"), "w") as f:
        f.write(str(os.getpid()))

hvd.init()
tf.keras.backend.set_floatx("float64")  # the reference's float64 maths, to the last bits
x_all, y_all = data()
model = tf.keras.Sequential([tf.keras.layers.Dense(
    1, kernel_initializer=tf.keras.initializers.Constant(INITIAL_KERNEL),
    bias_initializer=tf.keras.initializers.Constant(INITIAL_BIAS))])
model.build((None, FEATURES))
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(LR))
# Every sync broadcasts the optimizer's variables: create them now (a step with zero gradients
# leaves the weights as they are), so a worker that joins later has the same ones as the others.
optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
model.compile(loss="mse", optimizer=optimizer)
counters = {"resets": 0, "steps_run": 0}


class LoudState(hvd.elastic.KerasState):
    """KerasState whose commits rank 0 reports."""

    def save(self):
        super().save()
        if hvd.rank() == 0:
            print(f"committed {self.step}", flush=True)


class CountSteps(tf.keras.callbacks.Callback):
    """Counts the steps in the state (so the count is committed with the weights)."""

    def on_train_batch_end(self, batch, logs=None):
        state.step += 1
        counters["steps_run"] += 1
        if hvd.rank() == 0:
            print(f"step {state.step} size {hvd.size()} t={time.time():.3f}", flush=True)
        if step_sleep:
            time.sleep(step_sleep)


def on_reset():
    counters["resets"] += 1
    print(f"reset rank {hvd.rank()} size {hvd.size()} host {host} t={time.time():.3f}", flush=True)


state = LoudState(model, optimizer, epoch=0, batch=0, step=0)
state.register_reset_callbacks([on_reset])
# The step count and the batch and epoch numbers change before the commit that saves them.
callbacks = [CountSteps(), hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.CommitStateCallback(state, batches_per_commit=commit_every)]


@hvd.elastic.run
def train(state):
    part = rows(0, hvd.rank(), hvd.size())
    dataset = tf.data.Dataset.from_tensors((x_all[part], y_all[part])).repeat()
    # As Horovod's examples do: UpdateEpochStateCallback counts Keras' epochs from 0 per fit.
    model.fit(dataset, steps_per_epoch=steps_per_epoch, epochs=epochs - state.epoch,
              callbacks=callbacks, verbose=0)


train(state)
print(f"done rank {hvd.rank()} size {hvd.size()} step {state.step}", flush=True)
if hvd.rank() == 0:
    kernel, bias = model.get_weights()
    with open(out_path, "w") as f:
        json.dump({"kernel": kernel.ravel().tolist(), "bias": bias.ravel().tolist(),
                   "step": state.step, "epoch": state.epoch, "size": hvd.size(), "host": host,
                   **counters}, f)
