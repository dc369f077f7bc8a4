"""``ipu.all_to_all_op``: XLA's all-to-all and an all-gather over the replicas in sync (groups of
``replication_factor`` consecutive replicas), with the values of the other replicas."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu.ops import _replicas


def all_to_all(x, split_dimension: int, concat_dimension: int, replication_factor: int,
               name: Optional[str] = None):
    """Split ``x`` into ``replication_factor`` blocks along ``split_dimension``; block j goes to
    replica j of the group, which concatenates the blocks it receives along
    ``concat_dimension`` in the order of the sending replicas."""
    with tf.name_scope(name or "all_to_all"):
        x = tf.convert_to_tensor(x)
        rows, mine = _replicas.group_rows(x, replication_factor, "all_to_all")
        k = int(replication_factor)
        if x.shape[split_dimension] is not None and x.shape[split_dimension] % k:
            raise ValueError(f"all_to_all: dimension {split_dimension} of size "
                             f"{x.shape[split_dimension]} does not split into {k} blocks.")
        blocks = tf.stack(tf.split(rows, k, axis=split_dimension + 1))  # [block, sender, ...]
        received = tf.gather(blocks, mine)
        return tf.concat(tf.unstack(received, num=k), axis=concat_dimension)


def all_gather(x, replication_factor: int, name: Optional[str] = None):
    """``[replication_factor, *x.shape]`` per tensor of ``x`` (a tensor or a list): row r is the
    value of replica r of this replica's group."""
    with tf.name_scope(name or "all_gather"):
        out = [_replicas.group_rows(t, replication_factor, "all_gather")[0]
               for t in tf.nest.flatten(x)]
        return out[0] if len(out) == 1 else out
