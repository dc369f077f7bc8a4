"""``ipu.cross_replica_ops``: sums and means over the replicas of the current strategy.

Inside ``strategy.run`` of a strategy with several replicas (IPUHorovodStrategy,
IPUMultiWorkerStrategy: every replica of every instance; PopDistStrategy: the replicas of the
configured IPU system, every instance's only with multi-replica distribution; a replicated
IPUStrategy: its local replicas) the value is all-reduced over them; with one replica (or no
strategy) it is that replica's own value.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def _replicas() -> int:
    from popdist_launcher.ipu.ipu_strategy import replicas_of

    context = tf.distribute.get_replica_context()
    return replicas_of(context.strategy) if context is not None else 1


def _check_group(replica_group_size: Optional[int]) -> None:
    replicas = _replicas()
    if replica_group_size is not None and replica_group_size not in (replicas,):
        raise ValueError(f"replica_group_size={replica_group_size} is not supported: reductions "
                         f"span all {replicas} replica(s) in sync; leave it None.")


def cross_replica_sum(x, replica_group_size: Optional[int] = None, name: Optional[str] = None):
    """The sum of ``x`` over the replicas in sync."""
    _check_group(replica_group_size)
    with tf.name_scope(name or "cross_replica_sum"):
        if _replicas() == 1:
            return tf.identity(x)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x)


def cross_replica_mean(x, replica_group_size: Optional[int] = None, name: Optional[str] = None):
    """The mean of ``x`` over the replicas in sync."""
    _check_group(replica_group_size)
    with tf.name_scope(name or "cross_replica_mean"):
        if _replicas() == 1:
            return tf.identity(x)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, x)


def assume_equal_across_replicas(tensors, inplace: bool = False):
    """Tells the IPU compiler the tensors are equal on every replica; they pass unchanged."""
    return tensors if inplace else tf.nest.map_structure(tf.identity, tensors)
