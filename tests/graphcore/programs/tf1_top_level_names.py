"""A TF 1.15 program written against ``import tensorflow as tf`` (TF 1.15's top-level API, as
Graphcore's TF1 SDKs had it): placeholders, ``tf.get_variable``, ``tf.train``'s v1 optimizer and
Saver, ``tf.Session``, ``tf.logging``, TF 1.15's ``tf.initializers``, initializer classes (``dtype=``) and ``tf.losses``, and a barrier of Graphcore's Horovod in its own Graph and
Session. Writes OUT/tf1-names-<instance>.json (OUT: argv[1])."""
import json
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.ipu import horovod as hvd

tf.logging.set_verbosity(tf.logging.ERROR)
hvd.init()
out_dir, index = sys.argv[1], hvd.rank()
out = {"executing_eagerly": tf.executing_eagerly(),
       "names_kept": tf.summary.scalar is tf.compat.v2.summary.scalar}

with tf.Graph().as_default(), tf.Session() as session:  # a barrier: every instance's index summed
    out["sum_of_indices"] = float(session.run(hvd.allreduce(
        tf.constant(float(index)), op=hvd.Sum)))

x = tf.placeholder(tf.float32, [None, 2], name="x")
y = tf.placeholder(tf.float32, [None, 1], name="y")
with tf.variable_scope("model", reuse=tf.AUTO_REUSE):
    w = tf.get_variable("w", initializer=tf.constant([[0.5], [-0.5]]))
    # TF 1.15's own initializers and losses, not Keras's: dtype= and (labels, predictions)
    u = tf.get_variable("u", [1000], initializer=tf.initializers.random_uniform(
        minval=2.0, maxval=3.0, dtype=tf.float64, seed=1), dtype=tf.float64)
    k = tf.get_variable("k", [3], initializer=tf.constant_initializer(7, dtype=tf.int32),
                        dtype=tf.int32)
loss = tf.losses.mean_squared_error(y, tf.matmul(x, w))
train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
xs = np.arange(8, dtype=np.float32).reshape(4, 2) / 8 + index
ys = np.array([[1.0], [2.0], [3.0], [4.0]], dtype=np.float32)
saver = tf.train.Saver()
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    losses = []
    for _ in range(3):
        losses.append(float(session.run(loss, {x: xs, y: ys})))
        session.run(train, {x: xs, y: ys})
    path = saver.save(session, f"{out_dir}/model-{index}/ckpt")
    out["w"] = session.run(w).ravel().tolist()
    u_value = session.run(u)
    out["u"] = [str(u.dtype.base_dtype.name), float(u_value.min()), float(u_value.max())]
    out["k"] = session.run(k).tolist()
    session.run(w.assign(tf.zeros([2, 1])))
    saver.restore(session, path)
    out["restored"] = session.run(w).ravel().tolist()
out["losses"] = losses
with open(f"{out_dir}/tf1-names-{index}.json", "w") as f:
    json.dump(out, f)
