"""``popdist.synchronize()`` inside ``popdist.execute_on_instances`` on a subset of 2 or more
instances (run with 3 instances): a barrier among the subset only. Writes OUT/subset-<i>.json.

usage: popdist_subset.py OUT_DIR [tf1|members-only]
  tf1:          TensorFlow 1's graph mode
  members-only: only instances 0 and 1 call execute_on_instances (PopDist's documentation has
                every instance call it), so the group is never formed: the stall error follows
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import popdist  # noqa: E402

out_dir, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
index = popdist.getInstanceIndex()
if mode == "tf1":
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
popdist.init()
released = os.path.join(out_dir, "instance-1-passed-the-subset-barrier")
out = {"rounds": []}


def phase(round_):
    time.sleep(0.5 * index)  # instance 1 arrives later than instance 0
    arrived = time.time()
    popdist.synchronize()
    left = time.time()
    if index == 1 and round_ == 1:
        open(released, "w").close()
    return {"arrived": arrived, "left": left}


if mode == "members-only":
    if index in (0, 1):
        popdist.execute_on_instances({0, 1}, phase, 0)
    else:
        time.sleep(120)  # busy elsewhere: never takes part in forming the group
    sys.exit(0)

for round_ in range(2):  # the second round uses the group registered by the first
    out["rounds"].append(popdist.execute_on_instances({0, 1}, phase, round_))
if index == 2:
    # Instance 2 takes no part in the subset's barrier: it waits here for instance 1 to have
    # passed it (a barrier that waited for instance 2 too would never release instance 1).
    deadline = time.time() + 240
    while not os.path.exists(released) and time.time() < deadline:
        time.sleep(0.05)
    out["saw_instance_1_pass"] = os.path.exists(released)
popdist.synchronize()  # and a barrier of all three afterwards
out["all"] = popdist.execute_on_instances({0, 1, 2}, lambda: popdist.getInstanceIndex())
with open(os.path.join(out_dir, f"subset-{index}.json"), "w") as f:
    json.dump(out, f)
