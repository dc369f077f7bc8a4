"""Every public name of PopDist's Python API (``popdist``, ``popdist.tensorflow``) as a PopDist
program uses it: the launch's numbers, ``synchronize()`` as the barrier between phases (with
each instance's arrival and departure times), ``execute_on_instances``, the backend's state.
Writes OUT/popdist-<instance>.json.

usage: popdist_api.py OUT_DIR [tf1|stall]
  tf1:   TensorFlow 1's graph mode (synchronize still a barrier)
  stall: instance 1 never reaches the barrier (instance 0 must fail with the stall error)
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out_dir, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
index = popdist.getInstanceIndex()
out = {"mode": mode, "backend_before_init": popdist.isBackendInitialized()}
if mode == "tf1":
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()

popdist.init()
if mode == "stall" and index == 1:
    time.sleep(120)  # busy elsewhere: never reaches the barrier
    sys.exit(0)
popdist.registerDefaultBackend()
out["backend_after_init"] = popdist.isBackendInitialized()
out["values"] = {
    "isPopdistEnvSet": popdist.isPopdistEnvSet(), "getNumInstances": popdist.getNumInstances(),
    "getInstanceIndex": index, "getLocalInstanceIndex": popdist.getLocalInstanceIndex(),
    "getNumTotalReplicas": popdist.getNumTotalReplicas(),
    "getNumLocalReplicas": popdist.getNumLocalReplicas(),
    "getReplicaIndexOffset": popdist.getReplicaIndexOffset(),
    "getNumIpusPerReplica": popdist.getNumIpusPerReplica(),
    "getDeviceId": popdist.getDeviceId(), "getDeviceId(ipusPerReplica=1)": popdist.getDeviceId(1),
    "checkNumIpusPerReplica(own)": popdist.checkNumIpusPerReplica(popdist.getNumIpusPerReplica()),
    "checkNumIpusPerReplica(other)": popdist.checkNumIpusPerReplica(
        popdist.getNumIpusPerReplica() + 1),
}

# Three phases, each ended by the barrier; instance i spends 0.5 * i s longer in each phase.
out["phases"] = []
for phase in range(3):
    time.sleep(0.5 * index)
    arrived = time.time()
    popdist.synchronize()
    out["phases"].append({"arrived": arrived, "left": time.time()})

out["execute_on_0"] = popdist.execute_on_instances({0}, lambda: (popdist.synchronize(), index)[1])
arrived = time.time()
popdist.execute_on_instances(set(range(popdist.getNumInstances())), popdist.synchronize)
out["execute_on_all"] = {"arrived": arrived, "left": time.time()}
try:
    popdist.execute_on_instances({popdist.getNumInstances()}, print)
    out["execute_on_missing"] = "accepted"
except ValueError as error:
    out["execute_on_missing"] = str(error)

# popdist.tensorflow: the IPU configuration of this instance.
from tensorflow.python import ipu  # noqa: E402

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
mrd = config.experimental.multi_replica_distribution
out["set_ipu_config"] = {"process_count": mrd.process_count, "process_index": mrd.process_index,
                         "auto_select_ipus": config.auto_select_ipus}
out["names"] = sorted(popdist.__all__) + [f"tensorflow.{n}" for n in popdist.tensorflow.__all__]
popdist.finalizeBackend()
out["backend_after_finalize"] = popdist.isBackendInitialized()
with open(os.path.join(out_dir, f"popdist-{index}.json"), "w") as f:
    json.dump(out, f)
