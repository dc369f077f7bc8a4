"""``ipu.cross_replica_ops``: sums and means over the replicas.

The replicas are those of a replicated ``ipu_compiler.compile`` program (a TF1 graph built
outside any strategy on a system of several replicas, see ``ipu._replicated_compile``), or
those of the strategy whose ``strategy.run`` is calling (IPUHorovodStrategy,
IPUMultiWorkerStrategy: every replica of every instance; PopDistStrategy: the replicas of the
configured IPU system, every instance's only with multi-replica distribution; a replicated
IPUStrategy: its local replicas). With one replica (or no strategy) the value is that replica's
own. ``replica_group_size`` k (Graphcore's): the replicas form consecutive groups of k
(``{0 .. k-1}, {k .. 2k-1} ...``) and each reduces over its group; None or 0: one group.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu._loop_support import REPLICA
from popdist_launcher.ipu.ops import _replicas

_HALF = (tf.float16, tf.bfloat16)


def _group_size(replica_group_size: Optional[int], replicas: int, what: str) -> int:
    if replica_group_size is None or replica_group_size == 0:
        return replicas
    k = int(replica_group_size)
    if k < 1:
        raise ValueError(f"{what}: replica_group_size must be None, 0 (all replicas) or a "
                         f"positive divisor of the {replicas} replica(s), got {k}.")
    return k


def _reduce(x, replica_group_size: Optional[int], mean: bool, what: str):
    replicas, _ = _replicas.count_and_index()
    k = _group_size(replica_group_size, replicas, what)
    x = tf.convert_to_tensor(x)
    if replicas == 1 and k == 1:
        return tf.identity(x)
    # 16-bit floats are summed in float32 (a mean of large halves does not overflow)
    wide = tf.cast(x, tf.float32) if mean and x.dtype in _HALF else x
    if k == replicas and REPLICA.get() is None:
        context = tf.distribute.get_replica_context()
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, wide)
    else:
        rows, _ = _replicas.group_rows(wide, k, what)
        total = tf.reduce_sum(rows, axis=0)
    if not mean:
        return tf.cast(total, x.dtype)
    return tf.cast(total / tf.cast(k, total.dtype), x.dtype)


def cross_replica_sum(x, replica_group_size: Optional[int] = None, name: Optional[str] = None):
    """The sum of ``x`` over the replicas of this replica's group (all replicas by default)."""
    with tf.name_scope(name or "cross_replica_sum"):
        return _reduce(x, replica_group_size, mean=False, what="cross_replica_sum")


def cross_replica_mean(x, replica_group_size: Optional[int] = None, name: Optional[str] = None):
    """The mean of ``x`` over the replicas of this replica's group (all replicas by default)."""
    with tf.name_scope(name or "cross_replica_mean"):
        return _reduce(x, replica_group_size, mean=True, what="cross_replica_mean")


def assume_equal_across_replicas(tensors, inplace: bool = False):
    """Tells the IPU compiler the tensors are equal on every replica; they pass unchanged."""
    return tensors if inplace else tf.nest.map_structure(tf.identity, tensors)
