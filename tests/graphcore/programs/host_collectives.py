"""Graphcore's host collectives (``ipu.distributed.host_collective_ops``, SDK 3.1+) as
host_collective_ops_test.py uses them, unedited imports: allgather / allreduce SUM and MEAN /
broadcast of each of its dtypes, eagerly and in a tf.function; named tensors gathered, reduced
and broadcast in a different order on even and odd instances; dtype and shape mismatches; the
collectives' names in a graph; ``ipu.distributed.allgather`` (stacks in TF2, concatenates in a
TF1 graph) beside ``ipu.horovod.allgather`` (concatenates). Writes OUT/host-<instance>.json.

usage: host_collectives.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.ipu import distributed, horovod  # noqa: E402
from tensorflow.python.ipu.distributed import host_collective_ops as hco  # noqa: E402

DTYPES = (tf.float16, tf.float32, tf.int8, tf.int16, tf.int32, tf.int64)
SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN

tf.get_logger().setLevel("ERROR")  # a tf.function per check: retracing is the point
out_dir = sys.argv[1]
popdist.init()
index = popdist.getInstanceIndex()
even = index % 2 == 0


def value(result):
    """A result as JSON: its dtype's name and its values."""
    array = np.asarray(result)
    return [array.dtype.name, array.tolist()]


def error_of(call):
    try:
        call()
    except Exception as exc:  # the test compares the type and the message
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


out = {"instance": index, "eager": {}, "function": {}}
for mode, run in (("eager", lambda f: f()), ("function", lambda f: tf.function(f)())):
    for dtype in DTYPES:
        name = dtype.name

        def mine():
            return tf.constant(index, dtype=dtype)

        def from_0():
            return tf.constant(42 if index == 0 else 0, dtype=dtype)

        got = out[mode]
        got[f"allgather/{name}"] = value(run(lambda: hco.allgather(mine())))
        got[f"allreduce_sum/{name}"] = value(run(lambda: hco.allreduce(mine(), SUM)))
        got[f"allreduce_mean/{name}"] = value(run(lambda: hco.allreduce(mine(), MEAN)))
        got[f"broadcast/{name}"] = value(run(lambda: hco.broadcast(from_0())))
    out[mode]["allgather_vector"] = value(run(lambda: hco.allgather(tf.constant([index, index]))))
    out[mode]["broadcast_root_1"] = value(run(lambda: hco.broadcast(tf.constant([index + 7.0]),
                                                                     root_rank=1)))
    # ipu.distributed's allgather is this one in TF2 programs; ipu.horovod's is Horovod's.
    out[mode]["distributed_allgather"] = value(run(
        lambda: distributed.allgather(tf.constant([index, index]))))
    out[mode]["horovod_allgather"] = value(run(
        lambda: horovod.allgather(tf.constant([index, index]))))


# Named tensors in a different order on even and odd instances: paired by name.
def different_order(collective, initial):
    def step_even(x, y):
        res_x = collective(x)
        res_y = collective(y)
        return res_x, res_y

    def step_odd(x, y):
        res_y = collective(y)
        res_x = collective(x)
        return res_x, res_y

    x = tf.constant(initial, dtype=tf.float32)
    y = tf.constant([initial, initial], dtype=tf.int32)
    step = tf.function(step_even if even else step_odd)
    names = [op.name for op in step.get_concrete_function(x, y).graph.get_operations()
             if op.type.startswith("Horovod")]
    res_x, res_y = step(x, y)
    return {"x": value(res_x), "y": value(res_y), "op_names": sorted(names)}


out["different_order"] = {
    "allgather": different_order(hco.allgather, index),
    "allreduce": different_order(lambda t: hco.allreduce(t, SUM), index),
    "broadcast": different_order(hco.broadcast, 42 if index == 0 else 0),
}


@tf.function
def named_step():  # constants of one name ("Const"): tensor_name pairs them
    if even:
        first = hco.allreduce(tf.constant(1.0 + index), SUM, tensor_name="first")
        second = hco.allreduce(tf.constant(10.0 * index), SUM, tensor_name="second")
    else:
        second = hco.allreduce(tf.constant(10.0 * index), SUM, tensor_name="second")
        first = hco.allreduce(tf.constant(1.0 + index), SUM, tensor_name="first")
    return first, second


out["named"] = [value(t) for t in named_step()]
out["named_op_names"] = sorted(op.name for op in named_step.get_concrete_function().graph
                               .get_operations() if op.type.startswith("Horovod"))

# Instances that disagree on dtype (float32 / int32) or shape (scalar / [2]), eagerly.
other_dtype = tf.float32 if even else tf.int32
other_shape = 1 if even else [1, 1]
out["mismatch"] = {
    "allgather_dtype": error_of(lambda: hco.allgather(tf.constant(index, other_dtype))),
    "allgather_shape": error_of(lambda: hco.allgather(tf.constant(other_shape, tf.int32))),
    "allreduce_dtype": error_of(lambda: hco.allreduce(tf.constant(index, other_dtype), SUM)),
    "allreduce_shape": error_of(lambda: hco.allreduce(tf.constant(other_shape, tf.int32), SUM)),
    "broadcast_dtype": error_of(lambda: hco.broadcast(tf.constant(index, other_dtype))),
    "broadcast_shape": error_of(lambda: hco.broadcast(tf.constant(other_shape, tf.int32))),
}
out["after_mismatch"] = value(hco.allreduce(tf.constant(2.0), SUM))

# A TF1 graph run by a Session: ipu.distributed's allgather is Horovod's there (the TF1 SDKs').
with tf.Graph().as_default():
    gathered = distributed.allgather(tf.constant([index, index]))
    with tf.compat.v1.Session() as session:
        out["tf1_graph_distributed_allgather"] = value(session.run(gathered))

with open(os.path.join(out_dir, f"host-{index}.json"), "w") as f:
    json.dump(out, f)
