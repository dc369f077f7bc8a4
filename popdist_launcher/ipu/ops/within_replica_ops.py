"""``ipu.within_replica_ops``: collectives between the shards of one replica, given as a list with
one tensor per shard; a replica is one device here, so these are local tensor operations."""
from __future__ import annotations

from typing import List, Sequence

import tensorflow as tf

from popdist_launcher.ipu.ops.reduce_scatter_op import reduce_rows


def _validated(input_shards: Sequence) -> List[tf.Tensor]:
    shards = [tf.convert_to_tensor(s) for s in input_shards]
    if len({s.ref() for s in shards}) != len(shards):
        raise ValueError("input_shards should not contain any duplicate entries.")
    if len({s.dtype for s in shards}) != 1:
        raise ValueError("Expected tensors to all be of the same type.")
    if len({s.shape.rank for s in shards}) != 1:
        raise ValueError("Expected tensors to all be of the same rank.")
    return shards


def all_reduce(input_shards: Sequence, op: str):
    """Each shard's rank-0/1 tensor zero-padded to the longest, reduced element-wise with ``op``
    (COLLECTIVE_OP_ADD, ..._MUL, ..._MIN, ..._MAX, ..._LOGICAL_AND, ..._LOGICAL_OR,
    ..._LOCAL); one copy of the result per shard."""
    shards = [tf.reshape(s, [-1]) for s in _validated(input_shards)]
    length = max(s.shape[0] for s in shards)
    rows = tf.stack([tf.pad(s, [[0, length - s.shape[0]]]) for s in shards])
    if op == "COLLECTIVE_OP_LOCAL":
        return tuple(tf.identity(r) for r in tf.unstack(rows))
    reduced = reduce_rows(rows, op, 0, "within_replica_ops.all_reduce")
    return tuple(tf.identity(reduced) for _ in shards)


def all_gather(input_shards: Sequence, axis: int = 0):
    """Every shard's values, flattened and concatenated in shard order, reshaped to the shape of
    the shards concatenated along ``axis`` (rank 1 for scalars); one copy per shard."""
    shards = _validated(input_shards)
    flat = tf.concat([tf.reshape(s, [-1]) for s in shards], 0)
    if shards[0].shape.rank == 0:
        return [tf.identity(flat) for _ in shards]
    shape = shards[0].shape.as_list()
    for i, s in enumerate(shards[1:], 1):
        other = s.shape.as_list()
        if shape[:axis] != other[:axis] or shape[axis + 1:] != other[axis + 1:]:
            raise ValueError(f"Expecting tensor dimensions to all have the same sizes, except "
                             f"for dim {axis}, but got shapes {shape} and {other} for tensors 0 "
                             f"and {i}")
        shape[axis] += other[axis]
    return [tf.reshape(flat, shape) for _ in shards]
