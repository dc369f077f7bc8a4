"""The replicas an IPU collective spans here (those ``ipu.cross_replica_ops`` reduce over), this
replica's index among them, and the gather of one tensor from every one of them."""
from __future__ import annotations

from typing import Tuple

import tensorflow as tf


def count_and_index() -> Tuple[int, object]:
    """(number of replicas, this replica's index: an int or an int32 scalar tensor)."""
    from popdist_launcher.ipu.ipu_strategy import replicas_of

    context = tf.distribute.get_replica_context()
    replicas = replicas_of(context.strategy) if context is not None else 1
    if replicas == 1:
        return 1, 0
    index = context.replica_id_in_sync_group
    if replicas < context.num_replicas_in_sync:  # PopDistStrategy reaching the instance only
        index = index % replicas
    return replicas, index


def gather(x) -> tf.Tensor:
    """``[replicas, *x.shape]``: row r is replica r's ``x`` (a sum of one-row tensors)."""
    replicas, index = count_and_index()
    x = tf.convert_to_tensor(x)
    if replicas == 1:
        return tf.expand_dims(x, 0)
    wire = tf.int32 if x.dtype == tf.bool else x.dtype
    rows = tf.scatter_nd([[index]], [tf.cast(x, wire)], tf.concat([[replicas], tf.shape(x)], 0))
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, rows)
    return tf.cast(summed, x.dtype)


def group_rows(x, replication_factor: int, what: str):
    """(rows of the replicas in this replica's group, index within the group). Groups are
    consecutive runs of ``replication_factor`` replicas, as on IPUs."""
    replicas, index = count_and_index()
    k = int(replication_factor)
    if k < 1 or replicas % k:
        raise ValueError(f"{what}: replication_factor={k} has to divide the {replicas} "
                         f"replica(s) in sync into groups; pass a divisor of {replicas}.")
    rows = gather(x)
    if k == replicas:
        return rows, index
    start = (index // k) * k
    return rows[start:start + k], index % k
