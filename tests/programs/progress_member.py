"""A test instance that trains in lock step with its peers and reports its progress.

usage: progress_member.py DIR STEPS [RULE ...]
Steps 1..STEPS; before step s every instance of the attempt waits for the others to finish
step s-1 (files DIR/a<attempt>-s<step>-i<index>: peers that wait, as in a collective; at most
120 s), then reports step s (popdist_launcher.report_progress) and instance 0 writes DIR/ckpt
(the last step: the checkpoint; DIR/ckpt-a<attempt>). An attempt starts after the checkpoint of
the attempts before it. At the end each
instance writes DIR/done-a<attempt>-i<index> (pid, host, attempt, steps).
RULE: ACTION:ATTEMPT:INDEX:STEP, ACTION "stop" (SIGSTOP itself: hung) or "fail" (exit 3 after
SLOW s, from $SLOW, default 0), ATTEMPT a number or "*", STEP a step number, or "+N": the N-th
step of the attempt.
"""
import json
import os
import signal
import sys
import time

import popdist_launcher

folder, steps = sys.argv[1], int(sys.argv[2])
rules = [rule.split(":") for rule in sys.argv[3:]]
attempt = int(os.environ["POPRUN_RESTART_COUNT"])
index = int(os.environ["POPDIST_INSTANCE_INDEX"])
size = int(os.environ["POPDIST_NUM_INSTANCES"])
ckpt = os.path.join(folder, f"ckpt-a{attempt}")
earlier = [os.path.join(folder, f"ckpt-a{a}") for a in range(attempt)]
first = max([0] + [int(open(p).read()) for p in earlier if os.path.exists(p)]) + 1


def mark(step):
    path = os.path.join(folder, f"a{attempt}-s{step}-i{index}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def wait_for_peers(step):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(folder, f"a{attempt}-s{step}-i{i}"))
               for i in range(size)):
            return
        time.sleep(0.02)
    sys.exit(f"peers did not reach step {step}")


for step in range(first, steps + 1):
    for action, when, who, at in rules:
        at_step = first - 1 + int(at[1:]) if at.startswith("+") else int(at)
        if when in ("*", str(attempt)) and int(who) == index and at_step == step:
            if action == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                time.sleep(float(os.environ.get("SLOW", "0")))
                print(f"failing at step {step}", flush=True)
                sys.exit(3)
    if step > first:
        wait_for_peers(step - 1)
    time.sleep(0.05)  # the step's work
    mark(step)
    popdist_launcher.report_progress(step)
    if index == 0:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
wait_for_peers(steps)
with open(os.path.join(folder, f"done-a{attempt}-i{index}"), "w") as f:
    json.dump({"pid": os.getpid(), "host": os.environ.get("HOROVOD_HOSTNAME"),
               "attempt": attempt, "first": first}, f)
