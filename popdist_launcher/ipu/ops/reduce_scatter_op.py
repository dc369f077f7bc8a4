"""``ipu.reduce_scatter_op``: reduce rank-1 tensors over a group of replicas and give replica r of
the group the r-th block of the result (zero-padded to a whole number of blocks)."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu.ops import _replicas

REDUCTIONS = {
    "COLLECTIVE_OP_ADD": lambda rows: tf.reduce_sum(rows, 0),
    "COLLECTIVE_OP_MUL": lambda rows: tf.reduce_prod(rows, 0),
    "COLLECTIVE_OP_MIN": lambda rows: tf.reduce_min(rows, 0),
    "COLLECTIVE_OP_MAX": lambda rows: tf.reduce_max(rows, 0),
    "COLLECTIVE_OP_LOGICAL_AND": lambda rows: tf.reduce_all(tf.cast(rows, tf.bool), 0),
    "COLLECTIVE_OP_LOGICAL_OR": lambda rows: tf.reduce_any(tf.cast(rows, tf.bool), 0),
    "COLLECTIVE_OP_SQUARE_ADD": lambda rows: tf.reduce_sum(tf.square(rows), 0),
    "COLLECTIVE_OP_MEAN": lambda rows: tf.reduce_mean(rows, 0),
}


def reduce_rows(rows, op: str, mine, what: str):
    """``rows`` ([members, ...]) reduced with Graphcore's collective ``op`` (LOCAL: row
    ``mine``)."""
    if op == "COLLECTIVE_OP_LOCAL":
        return tf.gather(rows, mine)
    if op not in REDUCTIONS:
        raise ValueError(f"{what}: unknown op {op!r}; use one of COLLECTIVE_OP_LOCAL, "
                         f"{', '.join(REDUCTIONS)}.")
    return tf.cast(REDUCTIONS[op](rows), rows.dtype)


def reduce_scatter(x, replication_factor: int, op: str = "COLLECTIVE_OP_ADD",
                   name: Optional[str] = None):
    """For a rank-1 input of n elements: ``ceil(n / replication_factor)`` elements of the
    reduction per replica, replica r holding block r. A list in gives a list out."""
    k = int(replication_factor)
    outputs = []
    with tf.name_scope(name or "reduce_scatter"):
        for t in tf.nest.flatten(x):
            t = tf.convert_to_tensor(t)
            if t.shape.rank != 1:
                raise ValueError(f"reduce_scatter needs rank-1 tensors, got shape {t.shape}; "
                                 f"reshape to [-1] first.")
            n = t.shape[0]
            block = -(-n // k)
            padded = tf.pad(t, [[0, block * k - n]])
            rows, mine = _replicas.group_rows(padded, k, "reduce_scatter")
            reduced = reduce_rows(rows, op, mine, "reduce_scatter")
            outputs.append(tf.gather(tf.reshape(reduced, [k, block]), mine))
    return outputs[0] if len(outputs) == 1 else outputs
