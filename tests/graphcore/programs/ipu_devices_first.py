"""A research program's order: ``main()`` asks TensorFlow for IPU devices before any Graphcore
name is imported, and imports ``tensorflow.python.ipu`` only in its IPU branch, as on
Graphcore's TensorFlow, where the IPU devices exist from TensorFlow's import. Writes
OUT/ipu-devices-first-<instance>.json.

usage: ipu_devices_first.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402


def names(devices):
    return [[d.name, d.device_type] for d in devices]


def train_on_ipus(num_ipus):
    from tensorflow.python import ipu  # only here, as the program's IPU branch does

    import popdist
    import popdist.tensorflow
    config = ipu.config.IPUConfig()
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
    config.configure_ipu_system()
    with ipu.ipu_strategy.IPUStrategy().scope():
        total = tf.reduce_sum(tf.range(num_ipus * 10, dtype=tf.float32))
    return popdist.getInstanceIndex(), float(total)


def main(out_dir):
    logical = tf.config.list_logical_devices("IPU")
    physical = tf.config.list_physical_devices("IPU")
    if not logical:
        raise RuntimeError("Device not found")  # what the program does without IPUs
    index, total = train_on_ipus(len(logical))
    with open(os.path.join(out_dir, f"ipu-devices-first-{index}.json"), "w") as f:
        json.dump({"logical": names(logical), "physical": names(physical), "total": total,
                   "after": names(tf.config.list_logical_devices("IPU"))}, f)


if __name__ == "__main__":
    main(sys.argv[1])
