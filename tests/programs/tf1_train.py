"""A TensorFlow 1 program as Graphcore's TF1 tutorials write them, for the TF1 SDKs' graph mode:
``import tensorflow.compat.v1 as tf`` with no ``disable_v2_behavior()``, a dataset sharded per
instance in an IPUInfeedQueue, a training loop body (``ipu.loops.repeat`` with a running total
in ``inputs=[0.0]``) compiled with ``ipu_compiler.compile`` in an ``ipu_scope``, the losses in an
IPUOutfeedQueue, gradients averaged over every replica of every instance (CrossReplicaOptimizer,
PopDist's IPU configuration) and initial values broadcast from instance 0 (``ipu.horovod``), run
with ``Session.run``. Writes OUT/tf1-<instance>.json: final weights, each step's loss, the
running totals and what TensorFlow ran as (eager or graph, the variable kinds).

Usage: tf1_train.py OUT
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu import horovod as hvd  # noqa: E402

GLOBAL_BATCH, STEPS, RUNS, LR = 8, 3, 2, 0.05

popdist.init()
instances, index = popdist.getNumInstances(), popdist.getInstanceIndex()
rng = np.random.default_rng(0)
x_all = rng.normal(size=(GLOBAL_BATCH * STEPS * RUNS, 4)).astype("float32")
y_all = (x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.25).astype("float32")

dataset = tf.data.Dataset.from_tensor_slices((x_all, y_all))
dataset = dataset.shard(instances, index).batch(GLOBAL_BATCH // instances, drop_remainder=True)
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()


def training_loop_body(loss_running_total, x, y):
    with tf.variable_scope("dense", use_resource=True):
        w = tf.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
    # a TF 1.15 default (reference) variable; each instance starts from its own index
    b = tf.get_variable("b", [], initializer=tf.constant_initializer(float(index)))
    loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
    optimizer = ipu.optimizers.CrossReplicaOptimizer(tf.train.GradientDescentOptimizer(LR))
    train_op = optimizer.minimize(loss=loss)
    return [loss_running_total + loss, outfeed.enqueue(loss), train_op]


def train_one_run():
    return ipu.loops.repeat(n=STEPS, body=training_loop_body, inputs=[0.0], infeed_queue=infeed)


config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
with ipu.scopes.ipu_scope("/device:IPU:0"):
    train = ipu.ipu_compiler.compile(train_one_run)
dequeue = outfeed.dequeue()
broadcast = hvd.broadcast_global_variables(0)

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(broadcast)
    sess.run(infeed.initializer)
    totals = [float(sess.run(train)[0]) for _ in range(RUNS)]
    losses = sess.run(dequeue).tolist()
    w, b = sess.run(tf.global_variables())
result = {"w": w.ravel().tolist(), "b": float(b), "losses": losses, "totals": totals,
          "eager": tf.executing_eagerly(), "variables": sorted(type(v).__name__ for v in
                                                               tf.global_variables()),
          "instances": instances}
with open(os.path.join(sys.argv[1], f"tf1-{index}.json"), "w") as f:
    json.dump(result, f)
print(f"instance {index} of {instances}: trained {STEPS * RUNS} steps", flush=True)
