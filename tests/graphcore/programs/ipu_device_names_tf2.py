"""Device names in TF2 programs as Graphcore's TensorFlow reports them: eager tensors and
variables made under ``tf.device("/device:IPU:N")``, and the variables, results and optimizer
slots that IPUStrategy, PopDistStrategy and IPUHorovodStrategy place on their replicas, read as
``/job:localhost/replica:0/task:0/device:IPU:N``; ``variables_on_host`` keeps the host's name.
Every name is used again (``tf.device(t.device)``, ``tf.device(v.device)``, a checkpoint) and
the numbers are checked by the test against NumPy. Writes OUT/device-names-tf2-<instance>.json.

usage: ipu_device_names_tf2.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.distributed import popdist_strategy  # noqa: E402
from tensorflow.python.ipu.horovod import ipu_horovod_strategy  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out_dir = sys.argv[1]
config = ipu.config.IPUConfig()
if popdist.isPopdistEnvSet():
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
else:
    config.auto_select_ipus = 2
config.configure_ipu_system()
N, I = popdist.getNumInstances(), popdist.getInstanceIndex()
rng = np.random.default_rng(0)
X = rng.normal(size=(4, 3)).astype("float32")
W = rng.normal(size=(3, 2)).astype("float32")
Y = rng.normal(size=(4, 2)).astype("float32")
out = {"instance": I, "instances": N}


def devices(values):
    return [v.device for v in values]


# Eager code on IPU 1: an op's result, a constant, a variable, a tf.function's result; a
# host scope inside it and code outside it keep the CPU.
@tf.function
def double(a):
    return a * 2.0


with tf.device("/device:IPU:1"):
    product = tf.matmul(X, W)
    constant = tf.constant(X)
    variable = tf.Variable(W)
    doubled = double(X)
    with tf.device("/device:CPU:0"):
        on_host = tf.matmul(X, W)
outside = tf.matmul(X, W)
out["eager"] = {"product": product.device, "constant": constant.device,
                "variable": variable.device, "handle": variable.handle.device,
                "function": doubled.device, "host": on_host.device, "outside": outside.device}
# The names placed again: on the device they stand for.
with tf.device(product.device):
    again = product * 2.0
with tf.device(variable.device):
    variable.assign_add(tf.ones_like(variable))
out["again_device"] = again.device
out["product"] = product.numpy().tolist()
out["again"] = again.numpy().tolist()
out["doubled"] = doubled.numpy().tolist()
out["variable"] = variable.numpy().tolist()

# IPUStrategy over the instance's 2 IPUs: mirrored variables, replica 0's results, slots.
strategy = ipu.ipu_strategy.IPUStrategyV1()
with strategy.scope():
    w = tf.Variable(W)
    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    # run returns replica 0's result, as Graphcore's IPUStrategy (its executor reads a
    # replicated program's outputs back from replica 0)
    product = strategy.run(lambda x: tf.matmul(x, w), args=(X,))
    out["ipu_strategy"] = {
        "variable": w.device, "components": devices(w.values),
        "results": devices(strategy.experimental_local_results(product)),
        "values": [v.numpy().tolist() for v in strategy.experimental_local_results(product)],
        "function_results": devices(strategy.experimental_local_results(
            strategy.run(tf.function(lambda: w * 1.0))))}
    losses = strategy.run(tf.function(replica_step), args=(X, Y))
    out["ipu_strategy"]["optimizer"] = devices(optimizer.variables())
    out["ipu_strategy"]["trained"] = w.numpy().tolist()
    model = tf.keras.Sequential([tf.keras.layers.Dense(
        2, use_bias=False, kernel_initializer=tf.constant_initializer(W), input_shape=(3,))])
    out["ipu_strategy"]["keras_kernel"] = model.weights[0].device
    out["ipu_strategy"]["predict"] = model.predict(X, batch_size=2, verbose=0).tolist()
    # a checkpoint of variables named by IPU: saved and restored through those names
    checkpoint = tf.train.Checkpoint(w=w)
    path = checkpoint.save(os.path.join(out_dir, f"ckpt-{I}", "w"))
    w.assign(tf.zeros_like(w))
    checkpoint.restore(path)
    out["ipu_strategy"]["restored"] = [c.numpy().tolist() for c in w.values]

one_ipu = ipu.ipu_strategy.IPUStrategyV1("/device:IPU:1")
with one_ipu.scope():
    v1 = tf.Variable(2.0)
    result = one_ipu.run(lambda: v1 * 3.0)
    out["ipu1_strategy"] = {"variable": v1.device, "result": result.device,
                            "value": float(result)}

# PopDistStrategy over every instance (as Graphcore's popdist_strategy_test: v.device ends with
# /device:IPU:0, the initial value is instance 0's).
popdist_s = popdist_strategy.PopDistStrategy()
with popdist_s.scope():
    v = tf.Variable(float(I + 1))
    per_replica = popdist_s.run(lambda: v * float(I + 1))
    total = popdist_s.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    out["popdist"] = {"variable": v.device, "value": float(v.numpy()),
                      "results": devices(per_replica.values), "sum": float(total),
                      "local_replicas": len(per_replica.values)}

on_host = ipu_horovod_strategy.IPUHorovodStrategy(variables_on_host=True)
with on_host.scope():
    h = tf.Variable(1.0)
    result = on_host.run(lambda: h + 1.0)
    out["horovod_on_host"] = {"variable": h.device,
                              "results": devices(on_host.experimental_local_results(result))}

with open(os.path.join(out_dir, f"device-names-tf2-{I}.json"), "w") as f:
    json.dump(out, f)
