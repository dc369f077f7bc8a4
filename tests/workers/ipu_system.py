"""Configures the IPU system from the launcher (set_ipu_config) and reports the devices it got."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher import ipu  # noqa: E402

config = ipu.config.IPUConfig()
popdist_launcher.set_ipu_config(config, ipus_per_replica=1)
system = config.configure_ipu_system()
# One value per local replica, each computed on its own device.
values = []
for i, device in enumerate(system.devices):
    with tf.device(device):
        values.append(tf.constant(float(popdist_launcher.replica_index_offset() + i)))
result = {
    "process_index": config.experimental.multi_replica_distribution.process_index,
    "process_count": config.experimental.multi_replica_distribution.process_count,
    "auto_select_ipus": config.auto_select_ipus,
    "devices": list(system.devices),
    "logical_cpus": len(tf.config.list_logical_devices("CPU")),
    "placed_on": [v.device for v in values],
    "global_replicas": system.num_global_replicas,
}
with open(os.path.join(sys.argv[1], f"ipu-{popdist_launcher.instance_index()}.json"), "w") as f:
    json.dump(result, f)
