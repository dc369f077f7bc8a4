"""allgather, broadcast and broadcast_variables, and running a collective at once (eagerly, or
in a private graph for TensorFlow 1 programs)."""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Optional

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from popdist_launcher.collectives import _state
from popdist_launcher.collectives._describe import TensorLike, describe, horovod_name
from popdist_launcher.collectives._tracking import tracked


def allgather(tensor: TensorLike, name: Optional[str] = None) -> tf.Tensor:
    """Concatenate every instance's ``tensor`` along dimension 0, in instance order.

    The first dimension may differ between instances; the others and the dtype must match. A
    scalar is treated as a vector of one element, so gathering scalars gives a vector of size().
    """
    _state.require()
    value = tf.convert_to_tensor(tensor)
    description = describe("allgather", name, value)
    op_name = horovod_name("HorovodAllgather", name, value)
    if value.shape.rank == 0:
        value = tf.reshape(value, [1])
    return tracked(description, [value], lambda gated: hvd.allgather(gated[0], name=op_name))


def _check_root(root_rank: Any, size: int) -> int:
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) \
            or not 0 <= int(root_rank) < size:
        raise ValueError(
            f"root_rank must be an instance index in 0..{size - 1}, got {root_rank!r}.")
    return int(root_rank)


def broadcast(tensor: TensorLike, root_rank: int, name: Optional[str] = None) -> tf.Tensor:
    """Every instance gets instance ``root_rank``'s ``tensor`` (same shape and dtype everywhere)."""
    st = _state.require()
    root = _check_root(root_rank, st.size)
    value = tf.convert_to_tensor(tensor)
    description = describe("broadcast", name, value)
    op_name = horovod_name("HorovodBroadcast", name, value)
    return tracked(description, [value],
                    lambda gated: hvd.broadcast(gated[0], root_rank=root, name=op_name))


def broadcast_variables(variables: Iterable[tf.Variable], root_rank: int = 0
                        ) -> Optional[tf.Operation]:
    """Assign instance ``root_rank``'s value to each variable on every instance.

    Eager: the variables are updated when the call returns (returns None). Graph mode
    (tf.function, Session): returns the op that does it (a tf.group of the assignments).
    """
    st = _state.require()
    root = _check_root(root_rank, st.size)
    assigns = []
    for i, var in enumerate(variables):
        label = f"broadcast_variables_{i}_{re.sub('[^A-Za-z0-9_]', '_', var.name.split(':')[0])}"
        value = broadcast(var.read_value(), root, name=label)
        assigns.append(var.assign(value, read_value=False))
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns, name="broadcast_variables")


def run_now(build: Callable[[], tf.Tensor]) -> np.ndarray:
    """The value of the collective ``build()`` makes, computed now: eagerly, or in graph mode
    (TensorFlow 1 programs) in a private graph and session, so the program's graph is not
    touched."""
    if tf.executing_eagerly():
        return build().numpy()
    with tf.Graph().as_default():
        tensor = build()
        with tf.compat.v1.Session() as session:
            return session.run(tensor)

