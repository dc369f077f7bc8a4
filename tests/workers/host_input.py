"""Reads datasets through strategies at -np 1 every way a program can; writes
OUT_DIR/input-<strategy>.json.

usage: host_input.py STRATEGIES OUT_DIR
STRATEGIES: popdist, horovod, multi-worker, or several joined by commas: read through one after
the other in this process, each a strategy of its own (multi-worker alone: it makes the process a
worker of TensorFlow's cluster).

For each way (a distributed dataset or datasets from a function; a Python for loop, ``next`` in a
tf.function, ``get_next_as_optional`` until empty) it records the elements read, and which
iterator TensorFlow built under the strategy's dataset.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher import strategies  # noqa: E402

STRATEGIES = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
              "multi-worker": "IPUMultiWorkerStrategy"}
names, out_dir = sys.argv[1].split(","), sys.argv[2]
popdist_launcher.init()


def dataset(_=None):
    """10 elements in batches of 4: the last batch is partial."""
    return tf.data.Dataset.range(10).batch(4)


def read_through(strategy):
    """What every way of reading the dataset under ``strategy`` gives."""
    def local(value):
        return [t.numpy().tolist() for t in strategy.experimental_local_results(value)]

    def python_loop(dist):
        return [local(batch) for batch in dist]

    def optional_loop(dist):
        iterator = iter(dist)
        out = []
        while True:
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                return out
            out.append(local(optional.get_value()))

    def function_next(dist, steps):
        iterator = iter(dist)
        step = tf.function(lambda: next(iterator))
        return [local(step()) for _ in range(steps)]

    def iterator_kinds(dist):
        """The class names of the per-worker iterators TensorFlow built under ``dist``."""
        workers = getattr(iter(dist), "_iterators", [])
        return sorted({type(getattr(w, "_iterator", w)).__name__ for w in workers})

    results = {}
    for way, make in (("distribute_dataset", lambda: strategy.experimental_distribute_dataset(
                           dataset())),
                      ("from_function",
                       lambda: strategy.distribute_datasets_from_function(dataset))):
        steps = python_loop(make())
        results[way] = {"python_loop": steps, "optional_loop": optional_loop(make()),
                        "function_next": function_next(make(), min(2, len(steps))),
                        "iterators": iterator_kinds(make())}
    results["plain"] = [[batch.numpy().tolist()] for batch in dataset()]
    return results


for name in names:
    results = read_through(getattr(strategies, STRATEGIES[name])())
    with open(os.path.join(out_dir, f"input-{name}.json"), "w") as f:
        json.dump(results, f)
