"""``ipu.replication_ops``: the index of the replica running the code, among the replicas that
``ipu.cross_replica_ops`` reduce over (0 with one replica or outside ``strategy.run``)."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu.ops import _replicas


def replication_index(name: Optional[str] = None) -> tf.Tensor:
    """This replica's index as an int32 scalar."""
    _, index = _replicas.count_and_index()
    with tf.name_scope(name or "ReplicationIndex"):
        return tf.identity(tf.cast(index, tf.int32))
