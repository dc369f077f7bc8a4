"""IPU devices as Graphcore's TensorFlow shows them: ``tf.config.list_physical_devices("IPU")`` /
``list_logical_devices("IPU")`` (also ``tf.config.experimental``'s) before and after
configure_ipu_system, ``tf.device("/device:IPU:N")`` in eager code and in a tf.function, and
the device names of the ops placed there; the numbers are computed on the local devices that
stand for the IPUs. Writes OUT/ipu-devices-<instance>.json.

usage: ipu_devices.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.framework import device as tf_device  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out_dir = sys.argv[1]
out = {}


def names(devices):
    return [[d.name, d.device_type] for d in devices]


# Before anything is configured: the program checks that it has the IPUs it will use.
out["physical_before"] = names(tf.config.list_physical_devices("IPU"))
out["logical_before"] = names(tf.config.list_logical_devices("IPU"))
out["experimental_before"] = names(tf.config.experimental.list_logical_devices("IPU"))

config = ipu.config.IPUConfig()
if popdist.isPopdistEnvSet():
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
else:
    config.auto_select_ipus = 2
config.configure_ipu_system()

out["physical_after"] = names(tf.config.list_physical_devices("IPU"))
out["logical_after"] = names(tf.config.list_logical_devices("IPU"))
out["visible"] = names(tf.config.get_visible_devices("IPU"))
out["details"] = tf.config.experimental.get_device_details(
    tf.config.list_physical_devices("IPU")[0])
out["cpu_logical"] = len(tf.config.list_logical_devices("CPU"))
out["gpu"] = names(tf.config.list_physical_devices("GPU"))

x = np.arange(6, dtype=np.float32).reshape(2, 3)
w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
last = len(out["logical_after"]) - 1
with tf.device(f"/device:IPU:{last}"):
    eager = tf.matmul(x, w)
out["eager"] = eager.numpy().tolist()
out["eager_device"] = eager.device


@tf.function
def placed(a, b):
    with tf.device(f"/device:IPU:{last}"):
        product = tf.matmul(a, b)
        out["op_device"] = product.op.device
        out["op_device_type"] = tf_device.DeviceSpec.from_string(product.op.device).device_type
        out["tensor_device"] = product.device
    return tf.nn.relu(product)


result = placed(tf.constant(x), tf.constant(w))
out["function"] = result.numpy().tolist()
out["function_result_device"] = result.device

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    sums = strategy.run(tf.function(lambda: tf.reduce_sum(tf.matmul(x, w))))
    out["strategy"] = [float(s) for s in strategy.experimental_local_results(sums)]
out["numpy"] = {"matmul": (x @ w).tolist(), "relu": np.maximum(x @ w, 0).tolist(),
                "sum": float((x @ w).sum())}
with open(os.path.join(out_dir, f"ipu-devices-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
