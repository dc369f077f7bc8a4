"""Worker: mismatched collectives (shape, dtype, an instance that never calls) in one mode.

Usage (through the launcher): collectives_mismatch.py MODE OUT_DIR STALL_TIMEOUT
Instance 0 finally calls allreduce 'lonely_grad' that no other instance calls: it must fail
within about STALL_TIMEOUT seconds; it then exits with code 3. The others sleep instead of
calling (the launcher stops them). Each instance writes OUT_DIR/instance-<rank>.json.
"""
import json
import os
import sys
import time

import tensorflow as tf

from collectives_checks import Eager, Function, Session, to_py
from popdist_launcher import collectives as C

EXIT_STALLED = 3


class KeptFunction(Function):
    """tf.function mode, with every function kept referenced as a training loop keeps its step
    function: the errored steps' collectives stay pending in the watchdog's view (they are not
    dropped because the garbage collector happened to free their functions)."""

    def __init__(self):
        self.kept = []

    def run(self, build):
        function = tf.function(build, autograph=False)
        self.kept.append(function)
        return to_py(function())


def attempt(fn):
    try:
        return {"value": fn(), "error": None}
    except Exception as exc:
        return {"value": None, "type": type(exc).__name__, "error": str(exc)}


def write(out_dir, rank, record):
    path = os.path.join(out_dir, f"instance-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def main():
    mode_name, out_dir, stall_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    mode = {"eager": Eager, "function": KeptFunction, "session": Session}[mode_name]()
    C.init(stall_timeout=stall_timeout)
    rank, size = C.rank(), C.size()
    record = {"rank": rank, "size": size}
    record["shape"] = attempt(lambda: mode.run(
        lambda: C.allreduce(tf.ones([rank + 1]), op=C.Sum, name="mismatched_shape")))
    record["dtype"] = attempt(lambda: mode.run(lambda: C.allreduce(
        tf.ones([2], tf.float32 if rank == 0 else tf.float64), op=C.Sum, name="mismatched_dtype")))
    # Horovod keeps working after reporting a mismatch.
    record["after"] = attempt(lambda: mode.run(
        lambda: C.allreduce(tf.constant([1.0]), op=C.Sum, name="after_mismatch")))
    if rank != 0:
        write(out_dir, rank, record)
        time.sleep(120)  # never submits 'lonely_grad'; the launcher stops this instance
        return
    started = time.monotonic()
    record["stall"] = attempt(lambda: mode.run(
        lambda: C.allreduce(tf.ones([2]), op=C.Sum, name="lonely_grad")))
    record["stall"]["elapsed"] = time.monotonic() - started
    record["initialized_after_stall"] = C.is_initialized()
    write(out_dir, rank, record)
    if record["stall"]["error"] is not None:
        print(f"instance 0: {record['stall']['type']}: {record['stall']['error']}",
              file=sys.stderr, flush=True)
        sys.exit(EXIT_STALLED)


if __name__ == "__main__":
    main()
