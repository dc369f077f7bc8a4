"""A Horovod elastic custom training loop, written as for ``horovodrun`` elastic (plain Horovod
API): state committed every K steps, rolled back to the last commit when a peer fails.

usage: elastic_loop.py OUT_JSON [TOTAL [COMMIT_EVERY]]       (defaults: 60 steps, commit every 10)
environment: ELASTIC_PID_DIR  each worker writes its pid to <dir>/pid-<hostname>-<pid>
             ELASTIC_STEP_SLEEP  seconds to sleep after each step (default 0)
             ELASTIC_FAIL_STEP  the last rank exits with 3 as it begins this step, every time
                                (after ELASTIC_FAIL_SLOW seconds, default 0)
             ELASTIC_HANG=KIND:STEP  rank 1 hangs as it begins this step, once per job (the file
                                OUT_JSON.hung remembers it): KIND "busy" spins in Python,
                                "lock" waits on a lock it holds, "read" reads a pipe nobody
                                writes, "mismatch" calls hvd.broadcast_object instead;
                                "work" runs its own code for 20 s and goes on (no hang)
             ELASTIC_HANG_ON_SIGNAL=KIND  a worker that gets SIGUSR2 hangs so (busy, lock, read)

Step n trains on global batch n % BATCHES of elastic_reference.py, split across the ranks, so
the final weights equal elastic_reference.loop_reference(TOTAL) at any history of world sizes.
Rank 0 prints ``step <n> size <s> t=<time.time()>`` after each step (n = steps done) and
``committed <n>`` before each commit; every worker prints ``reset rank <r> size <s> host <h>
t=<time>`` after a reset and ``done rank <r> size <s> step <n>`` at the end. The final rank 0
writes OUT_JSON: kernel, bias, step, size, host, and its own resets and steps run.
"""
import json
import importlib.util
import os
import signal
import socket
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if importlib.util.find_spec("tf_keras"):  # TensorFlow 2.16+ (2.15 has Keras 2 only)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # a Keras 2 program (its legacy optimizer)
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

from elastic_reference import (BATCHES, FEATURES, INITIAL_BIAS, INITIAL_KERNEL, LR,  # noqa: E402
                               data, rows)

out_path = sys.argv[1]
total = int(sys.argv[2]) if len(sys.argv) > 2 else 60
commit_every = int(sys.argv[3]) if len(sys.argv) > 3 else 10
step_sleep = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))
fail_step = int(os.environ.get("ELASTIC_FAIL_STEP", "0"))
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
optimizer = tf.keras.optimizers.legacy.SGD(LR)
# Every sync broadcasts the optimizer's variables: create them now (a step with zero gradients
# leaves the weights as they are), so a worker that joins later has the same ones as the others.
optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


counters = {"resets": 0, "steps_run": 0}
hang_kind, _, hang_step = os.environ.get("ELASTIC_HANG", "").partition(":")


def hang(kind):
    if kind == "work":  # not a hang: 20 s of its own code (NumPy), then it goes on
        end = time.monotonic() + 20
        while time.monotonic() < end:
            sum(range(10000))
        return
    if kind == "busy":
        while True:
            pass
    elif kind == "lock":
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    elif kind == "read":
        read_end, _ = os.pipe()
        os.read(read_end, 1)
    elif kind == "mismatch":
        hvd.broadcast_object(hvd.rank(), root_rank=0)


if os.environ.get("ELASTIC_HANG_ON_SIGNAL"):
    signal.signal(signal.SIGUSR2, lambda signum, frame: hang(os.environ["ELASTIC_HANG_ON_SIGNAL"]))


def maybe_hang(step, rank):
    """ELASTIC_HANG: rank 1 hangs before ``step``, the first time any worker gets there."""
    if not hang_kind or step != int(hang_step) or rank != 1:
        return
    flag = out_path + ".hung"
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    print(f"rank {rank} hangs ({hang_kind}) at step {step}", flush=True)
    hang(hang_kind)


def on_reset():
    counters["resets"] += 1
    print(f"reset rank {hvd.rank()} size {hvd.size()} host {host} t={time.time():.3f}", flush=True)


state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=0)
state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < total:
        rank, size = hvd.rank(), hvd.size()
        if state.step + 1 == fail_step and rank == size - 1:
            time.sleep(float(os.environ.get("ELASTIC_FAIL_SLOW", "0")))
            print(f"failing at step {fail_step}", flush=True)
            os._exit(3)
        maybe_hang(state.step + 1, rank)
        part = rows(state.step % BATCHES, rank, size)
        train_step(tf.constant(x_all[part]), tf.constant(y_all[part]))
        state.step += 1
        counters["steps_run"] += 1
        if rank == 0:
            print(f"step {state.step} size {size} t={time.time():.3f}", flush=True)
        if step_sleep:
            time.sleep(step_sleep)
        if state.step % commit_every == 0:
            if rank == 0:
                print(f"committed {state.step}", flush=True)
            state.commit()


train(state)
print(f"done rank {hvd.rank()} size {hvd.size()} step {state.step}", flush=True)
if hvd.rank() == 0:
    kernel, bias = model.get_weights()
    with open(out_path, "w") as f:
        json.dump({"kernel": kernel.ravel().tolist(), "bias": bias.ravel().tolist(),
                   "step": state.step, "size": hvd.size(), "host": host, **counters}, f)
