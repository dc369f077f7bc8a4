"""Writes this instance's launch environment to OUT_DIR/instance-<i>.json."""
import json
import os
import sys

names = [n for n in os.environ
         if n.startswith(("POPDIST_", "HOROVOD_", "POPRUN_", "TF_CONFIG", "MY_"))]
index = os.environ["POPDIST_INSTANCE_INDEX"]
with open(os.path.join(sys.argv[1], f"instance-{index}.json"), "w") as f:
    json.dump({n: os.environ[n] for n in names}, f)
