"""A test instance of an elastic job: records who it is in each attempt, then waits.

usage: elastic_member.py DIR KILLED [UNTIL]
Writes DIR/a<attempt>-i<index>.json (pid, host, instance count, restart count, Slurm step). On
attempt 0 the instances in the comma-separated KILLED ("-" for none) then kill themselves with
SIGKILL (an index followed by "+": in every attempt); the others wait until the file DIR/UNTIL
exists (at most 120 s; without UNTIL they exit at once).
"""
import json
import os
import signal
import sys
import time

folder, killed = sys.argv[1], sys.argv[2]
until = sys.argv[3] if len(sys.argv) > 3 else None
attempt = int(os.environ["POPRUN_RESTART_COUNT"])
index = int(os.environ["POPDIST_INSTANCE_INDEX"])
me = {"pid": os.getpid(), "host": os.environ["HOROVOD_HOSTNAME"], "attempt": attempt,
      "num_instances": int(os.environ["POPDIST_NUM_INSTANCES"]), "index": index,
      "slurm_step": os.environ.get("SLURM_STEP_ID")}
tmp = os.path.join(folder, f".a{attempt}-i{index}.tmp")
with open(tmp, "w") as f:
    json.dump(me, f)
os.replace(tmp, os.path.join(folder, f"a{attempt}-i{index}.json"))
victims = [] if killed == "-" else killed.split(",")
if (attempt == 0 and str(index) in victims) or f"{index}+" in victims:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
deadline = time.monotonic() + 120
while until and not os.path.exists(os.path.join(folder, until)) and time.monotonic() < deadline:
    time.sleep(0.1)
