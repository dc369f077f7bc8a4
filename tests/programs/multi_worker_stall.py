"""An IPUMultiWorkerStrategy job that a test stalls: after a first sum over the workers each
writes OUT_DIR/pid-<task>, waits for OUT_DIR/go (the test stops and continues a worker in
between), sums again and writes OUT_DIR/result-<task>.json with both sums.

usage: multi_worker_stall.py OUT_DIR
"""
import json
import os
import sys
import time

import tensorflow as tf
from tensorflow.python import ipu

out = sys.argv[1]
strategy = ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategy()
task = strategy.cluster_resolver.task_id


def total(x: float) -> float:
    per_replica = strategy.run(lambda: tf.constant(x))
    return float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))


first = total(task + 1.0)
with open(os.path.join(out, f"pid-{task}"), "w") as f:
    f.write(str(os.getpid()))
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.1)
with open(os.path.join(out, f"result-{task}.json"), "w") as f:
    json.dump([first, total(10.0 * (task + 1))], f)
