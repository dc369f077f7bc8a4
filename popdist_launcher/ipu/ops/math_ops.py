"""``ipu.math_ops``: Graphcore's serialized matmul and segment sum with their plain meanings.
Serializing a matmul saves IPU code size and changes no number, so it is one ``tf.matmul``."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

_SERIALIZATION_DIMENSIONS = ("a_columns", "a_rows_b_columns", "b_rows")


def serialized_matmul(a, b, serialization_factor: int, serialization_dimension: str,
                      transpose_a: bool = False, transpose_b: bool = False,
                      name: Optional[str] = None):
    """``a @ b`` (after the optional transpositions) on tensors of rank >= 2."""
    serialization_factor = int(serialization_factor)
    if serialization_factor < 1:
        raise ValueError(f"serialization_factor has to be at least 1, but was "
                         f"{serialization_factor}.")
    if serialization_dimension not in _SERIALIZATION_DIMENSIONS:
        raise ValueError(f"Invalid serialization_dimension={serialization_dimension!r}, expected "
                         f"one of: {', '.join(_SERIALIZATION_DIMENSIONS)}.")
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    for label, tensor in (("a", a), ("b", b)):
        if tensor.shape.rank is not None and tensor.shape.rank < 2:
            raise ValueError(f"Expected tensor '{label}' to have a minimum rank of 2")
    with tf.name_scope(name or "serialized_matmul"):
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def segment_sum(data, segment_ids, num_segments: int, name: Optional[str] = None):
    """Sums of the rows of ``data`` per segment id (sorted ids), ``num_segments`` rows."""
    with tf.name_scope(name or "segment_sum"):
        return tf.math.unsorted_segment_sum(data, segment_ids, num_segments)
