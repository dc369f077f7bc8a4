"""Device names of a TensorFlow 1 graph placed on an IPU, as Graphcore's TF1 tests read them
(``logits.device == "/device:IPU:0"`` under ``ipu_scope``, with a while loop and its colocated
gradients): every op built under ``ipu_scope('/device:IPU:0')`` or ``tf.device('/device:IPU:0')``
names the IPU, gradient ops colocated with them too (each op as stock TensorFlow places the
same graph on ``/device:CPU:0``), while the GraphDef (what the runtime places) names the local
device. The same graph built with no device gives the reference numbers. Writes OUT/device-names-<instance>.json.

usage: ipu_device_names_tf1.py OUT_DIR
"""
import contextlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

import popdist  # noqa: E402

tf.compat.v1.disable_v2_behavior()  # graph mode and TensorFlow 1's while loops
out_dir = sys.argv[1]
index = popdist.getInstanceIndex()
STEPS, T, B, LR = 3, 5, 4, 0.1
rng = np.random.default_rng(index)
xs = rng.normal(size=(T, B, 1)).astype(np.float32)
ys = rng.normal(size=(B, 1)).astype(np.float32)


def build(place):
    """An RNN over T steps in a while loop, its loss and a gradient step whose gradients are
    colocated with the forward ops."""
    graph = tf.Graph()
    with graph.as_default():
        x, y = tf.constant(xs), tf.constant(ys)
        with place():
            w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5]]), use_resource=True)
            u = tf.compat.v1.get_variable("u", initializer=tf.constant([[0.3]]), use_resource=True)

            def body(t, h):
                return t + 1, tf.tanh(tf.matmul(tf.gather(x, t), w) + tf.matmul(h, u))

            _, h = tf.compat.v1.while_loop(lambda t, h: t < T, body,
                                           [tf.constant(0), tf.zeros([B, 1])])
            loss = tf.reduce_mean((h - y) ** 2)
            train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
                loss, colocate_gradients_with_ops=True)
        init = tf.compat.v1.global_variables_initializer()
    return graph, h, loss, train, init, (w, u)


def run(place):
    graph, h, loss, train, init, weights = build(place)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        losses = [float(session.run([loss, train])[0]) for _ in range(STEPS)]
        final = [float(v) for v in session.run([tf.reshape(w, []) for w in weights])]
    return {"losses": losses, "weights": final, "h_device": h.device, "loss_device": loss.op.device,
            "train_device": train.device,
            "devices": {op.name: op.device for op in graph.get_operations()},
            "graph_def_devices": {n.name: n.device for n in graph.as_graph_def().node}}


cfg = ipu.config.IPUConfig()
cfg.auto_select_ipus = 1
cfg.configure_ipu_system()
got = {"ipu_scope": run(lambda: ipu.scopes.ipu_scope("/device:IPU:0")),
       "tf_device": run(lambda: tf.device("/device:IPU:0")),
       "cpu": run(lambda: tf.device("/device:CPU:0")),
       "reference": run(contextlib.nullcontext)}
h = np.zeros((B, 1), np.float32)
for t in range(T):
    h = np.tanh(xs[t] * 0.5 + h * 0.3)
got["numpy_first_loss"] = float(np.mean((h - ys) ** 2))
with open(os.path.join(out_dir, f"device-names-{index}.json"), "w") as f:
    json.dump(got, f)
