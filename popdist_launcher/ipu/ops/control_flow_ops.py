"""``ipu.control_flow_ops.barrier``: outputs usable only once every input has been computed."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def barrier(tensors, insert_barrier_for_gradients: bool = False, name: Optional[str] = None):
    """``tensors`` (any structure), each output depending on all of them."""
    flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(tensors)]
    with tf.name_scope(name or "barrier"), tf.control_dependencies(flat):
        return tf.nest.pack_sequence_as(tensors, [tf.identity(t) for t in flat])
