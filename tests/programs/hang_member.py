"""A Horovod training loop whose one rank hangs on request, for the hang check's tests.

usage: hang_member.py MODE STEPS [FAULT:RANK:STEP[:SECONDS]]
MODE "eager" (an hvd.allreduce per step) or "function" (hvd.DistributedGradientTape in a
tf.function). Before step STEP, rank RANK: "busy" spins in Python, "lock" waits on a lock it
holds, "read" reads a pipe nobody writes, "stop" stops itself (SIGSTOP), "mismatch" calls
hvd.broadcast_object instead of the step, "long" sleeps SECONDS inside
popdist_launcher.long_phase, "tfbusy" runs TensorFlow for SECONDS, "allown" (every rank) sleeps
SECONDS in its own code; only in a job's first attempt. Each rank prints "step N rank R" after
each step and "done rank R weight W" at the end; a rank that hangs prints "rank R hangs (FAULT)"
first.
"""
import os
import signal
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

import popdist_launcher  # noqa: E402

mode, steps = sys.argv[1], int(sys.argv[2])
fault = sys.argv[3].split(":") if len(sys.argv) > 3 else ["none", "-1", "-1"]
kind, who, at = fault[0], int(fault[1]), int(fault[2])
seconds = float(fault[3]) if len(fault) > 3 else 0.0
if os.environ.get("POPRUN_RESTART_COUNT", "0") != "0":  # the fault is the first attempt's
    kind = "none"
hvd.init()
rank = hvd.rank()
weight = tf.Variable(1.0, dtype=tf.float64)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.square(weight * x - 1.0)
    tape = hvd.DistributedGradientTape(tape)
    grad = tape.gradient(loss, [weight])[0]
    weight.assign_sub(0.01 * grad)


@tf.function
def busy_tensorflow(seconds):
    start = tf.timestamp()
    total = tf.constant(0.0, tf.float64)
    while tf.timestamp() - start < seconds:
        total += tf.reduce_sum(tf.random.uniform([1000], dtype=tf.float64))
    return total


def hang():
    if kind == "busy":
        while True:
            pass
    if kind == "lock":
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    if kind == "read":
        read_end, _ = os.pipe()
        os.read(read_end, 1)
    if kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "mismatch":
        hvd.broadcast_object(rank, root_rank=0)


for step in range(1, steps + 1):
    if step == at and (rank == who or kind == "allown"):
        if kind == "long":
            with popdist_launcher.long_phase("a long evaluation"):
                time.sleep(seconds)
        elif kind == "tfbusy":
            busy_tensorflow(tf.constant(seconds, tf.float64))
        elif kind == "allown":
            time.sleep(seconds)
        else:
            print(f"rank {rank} hangs ({kind})", flush=True)
            hang()
    x = tf.constant(float(rank + 1), tf.float64)
    if mode == "eager":
        grad = hvd.allreduce(2.0 * (weight * x - 1.0) * x)
        weight.assign_sub(0.01 * grad)
    else:
        train_step(x)
    print(f"step {step} rank {rank}", flush=True)
    time.sleep(0.1)
print(f"done rank {rank} weight {weight.numpy():.12f}", flush=True)
