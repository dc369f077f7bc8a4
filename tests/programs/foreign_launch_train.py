"""Records the launch as the library sees it, then trains as tests/workers/train_equivalence.py
(same arguments: MODE STRATEGY OUT_DIR); writes OUT_DIR/identity-<instance>.json beside its
weights. Started by mpirun, torchrun-style variables or a TF_CONFIG, never by poprun-lite."""
import json
import os
import runpy
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import popdist  # noqa: E402

import popdist_launcher  # noqa: E402

mode, strategy_name, out_dir = sys.argv[1:4]
identity = {
    "launcher": popdist_launcher.context().launcher,
    "is_set": popdist.isPopdistEnvSet(),
    "instances": popdist.getNumInstances(),
    "index": popdist.getInstanceIndex(),
    "local_index": popdist.getLocalInstanceIndex(),
    "total_replicas": popdist.getNumTotalReplicas(),
    "local_replicas": popdist.getNumLocalReplicas(),
    "offset": popdist.getReplicaIndexOffset(),
}
trainer = Path(__file__).resolve().parent.parent / "workers" / "train_equivalence.py"
sys.argv[0] = str(trainer)
runpy.run_path(str(trainer), run_name="__main__")
if strategy_name != "multi-worker":
    import horovod.tensorflow as hvd

    identity["horovod"] = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
                           "mpi": bool(hvd.mpi_enabled()), "gloo": bool(hvd.gloo_enabled())}
with open(os.path.join(out_dir, f"identity-{identity['index']}.json"), "w") as f:
    json.dump(identity, f)
