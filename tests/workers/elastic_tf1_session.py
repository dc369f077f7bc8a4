"""A TensorFlow 1 program as Graphcore's TF1 SDKs ran them (graph mode, run under --tf1) that
saves a tf.train.Saver checkpoint after every loop run and restores it when started again: the
elastic-restart TF1 session program.

usage: elastic_tf1_session.py CKPT_DIR OUT_DIR RUNS [KILL_AFTER_RUN KILLED]
Each run is an ipu.loops.repeat of two steps over an IPUInfeedQueue, compiled in an ipu_scope,
gradients averaged over every instance (CrossReplicaOptimizer); every step's global batch is the
same 12 rows of elastic_estimator.py (instance i of n takes its 12/n), so the final weights are
elastic_estimator.reference(2 * RUNS) whatever n is. On the first attempt the instances in the
comma-separated KILLED kill themselves with SIGKILL after run KILL_AFTER_RUN. Instance 0 saves the
checkpoints and writes OUT_DIR/final.json.
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu import horovod as hvd  # noqa: E402

from elastic_estimator import LR, ROWS, W0, X, Y  # noqa: E402

STEPS_PER_RUN = 2
ckpt_dir, out_dir, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
kill_after = int(sys.argv[4]) if len(sys.argv) > 4 else -1
killed = [int(i) for i in sys.argv[5].split(",")] if len(sys.argv) > 5 else []
attempt = int(os.environ.get("POPRUN_RESTART_COUNT", "0"))

popdist.init()
n, i = popdist.getNumInstances(), popdist.getInstanceIndex()
dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shard(n, i)
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(
    dataset.batch(ROWS // n, drop_remainder=True).repeat())


def step(x, y):
    with tf.variable_scope("model", use_resource=True):
        w = tf.get_variable("w", initializer=W0)
        b = tf.get_variable("b", initializer=0.0)
    loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
    optimizer = ipu.optimizers.CrossReplicaOptimizer(tf.train.GradientDescentOptimizer(LR))
    return optimizer.minimize(loss)


config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
with ipu.scopes.ipu_scope("/device:IPU:0"):
    train = ipu.ipu_compiler.compile(
        lambda: ipu.loops.repeat(n=STEPS_PER_RUN, body=step, infeed_queue=infeed))
runs_done = tf.get_variable("runs_done", initializer=tf.constant(0, tf.int64), trainable=False,
                            use_resource=True)
count_run = runs_done.assign_add(1)
saver = tf.train.Saver()
broadcast = hvd.broadcast_global_variables(0)

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if latest:
        saver.restore(sess, latest)
    sess.run(broadcast)
    sess.run(infeed.initializer)
    resumed_at = int(sess.run(runs_done))
    for _ in range(resumed_at, runs):
        sess.run(train)
        done = int(sess.run(count_run))
        if i == 0:
            saver.save(sess, os.path.join(ckpt_dir, "model"), global_step=done)
        if attempt == 0 and i in killed and done >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
    with tf.variable_scope("model", reuse=True):
        w, b, ended_at = sess.run([tf.get_variable("w"), tf.get_variable("b"), runs_done])
if i == 0:
    with open(os.path.join(out_dir, "final.json"), "w") as f:
        json.dump({"w": w.ravel().tolist(), "b": float(b), "runs": int(ended_at),
                   "resumed_at": resumed_at, "attempt": attempt, "num_instances": n}, f)
