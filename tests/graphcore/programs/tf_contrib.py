"""A TF 1.15 program's use of ``tensorflow.contrib`` (as Graphcore's TF1 applications use it):
Xavier and variance-scaling initializers, ``compiler.xla.compile``, ``data.AUTOTUNE``,
``framework``'s checkpoint functions, ``rnn.LSTMCell``; what a part that is not provided says.
Run with TensorFlow 1 behaviour (--tf1). Writes OUT/contrib-<instance>.json (OUT: argv[1])."""
import json
import sys

import numpy as np
import popdist
import tensorflow.compat.v1 as tf
from tensorflow.contrib.compiler import xla
from tensorflow.contrib.framework.python.framework import checkpoint_utils

out_dir, index = sys.argv[1], popdist.getInstanceIndex()
layers = tf.contrib.layers
out = {"eager": tf.executing_eagerly(), "autotune": tf.contrib.data.AUTOTUNE == tf.data.AUTOTUNE,
       "lstm": tf.contrib.rnn.LSTMCell is tf.nn.rnn_cell.LSTMCell}
variables = {
    "xavier_uniform": tf.get_variable("a", [3, 3, 16, 32], initializer=layers.xavier_initializer(
        seed=1)),
    "xavier_normal": tf.get_variable("b", [200, 300], initializer=layers.xavier_initializer(
        uniform=False, seed=2)),
    "he_normal": tf.get_variable("c", [400, 100], initializer=layers.variance_scaling_initializer(
        seed=3)),
    "xavier_float16": tf.get_variable("d", [50, 70], dtype=tf.float16,
                                      initializer=layers.xavier_initializer(dtype=tf.float16)),
}
x = tf.placeholder(tf.float32, [4, 2])
w = tf.get_variable("w", initializer=tf.constant([[1.0], [2.0]]))
(y,) = xla.compile(lambda a: tf.reduce_sum(tf.matmul(a, w)) * (index + 1), [x])
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    for name, variable in variables.items():
        value = session.run(variable).astype(np.float64)
        out[name] = {"dtype": variable.dtype.base_dtype.name, "min": value.min(),
                     "max": value.max(), "std": value.std(), "mean": value.mean()}
    out["xla"] = float(session.run(y, {x: np.ones((4, 2), np.float32)}))
    path = tf.train.Saver([w]).save(session, f"{out_dir}/ckpt-{index}/model")
out["checkpoint"] = checkpoint_utils.list_variables(path)
out["load"] = checkpoint_utils.load_variable(path, "w").ravel().tolist()
for statement in ("import tensorflow.contrib.slim", "tf.contrib.slim"):
    try:
        exec(statement, {"tf": tf})
    except (ImportError, AttributeError) as e:
        out[statement] = [type(e).__name__, str(e)]
with open(f"{out_dir}/contrib-{index}.json", "w") as f:
    json.dump(out, f)
