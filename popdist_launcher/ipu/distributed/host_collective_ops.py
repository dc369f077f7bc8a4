"""``ipu.distributed.host_collective_ops``: Graphcore's PopDist host collectives between instances
(SDK 3.1+; ``ipu.distributed``'s ``allgather`` in TF2 programs is this module's).

``allgather`` stacks every instance's value on a new dimension 0 (N instances' scalars give
``[N]``, their ``[2]`` vectors ``[N, 2]``); ``allreduce`` takes a ``tf.distribute.ReduceOp``
(integer MEAN rounds toward zero, in the value's dtype); ``broadcast`` sends ``root_rank``'s value.
Every instance passes the same dtype and shape. Inside a ``tf.function`` instances pair
collectives by name (``tensor_name``, else ``PopDistAllGather_`` / ``PopDistAllReduce_`` /
``PopDistBroadcast_`` and the value's name), so their order may differ between instances;
eagerly they pair by call order. An eager collective whose instances disagree on dtype or shape
raises ``tf.errors.UnknownError`` ("Tensor layouts did not match on all instances") on each
of them, as Graphcore's do; inside a ``tf.function`` Horovod's own error is raised by the call.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, TypeVar

import tensorflow as tf

from popdist_launcher import collectives
from popdist_launcher.ipu.distributed._ops import horovod_op, started

T = TypeVar("T")

# Horovod's words for a layout mismatch: "Mismatched data types: ..." and
# "Mismatched ALLREDUCE tensor shapes: ..." (ALLGATHER, BROADCAST); the rank is part of the shape.
_LAYOUT_MISMATCH = re.compile(r"Mismatched (data types|[A-Z_]+ tensor shapes)")
LAYOUT_MISMATCH_MESSAGE = "Tensor layouts did not match on all instances"


def _collective_name(prefix: str, value: Any, tensor: tf.Tensor,
                     tensor_name: Optional[str]) -> Optional[str]:
    """The name that pairs the collective across instances in a graph: ``tensor_name``, else
    ``prefix`` and the name of ``value`` (a variable's own, not its read's) in TensorFlow's
    op-name characters. Eager collectives pair by call order (a given ``tensor_name`` still
    names the collective in errors)."""
    if tensor_name:
        return tensor_name
    if tf.executing_eagerly():
        return None
    label = value.name if isinstance(value, tf.Variable) else tensor.name
    return f"{prefix}_{re.sub('[^a-zA-Z0-9_]', '_', label)}"


def _layouts_checked(run: Callable[[], T]) -> T:
    """``run()``, with Horovod's dtype and shape mismatch errors raised as Graphcore raises
    them: ``tf.errors.UnknownError`` saying the layouts did not match (Horovod's text kept)."""
    try:
        return run()
    except tf.errors.OpError as exc:
        if isinstance(exc, tf.errors.UnknownError) or not _LAYOUT_MISMATCH.search(exc.message):
            raise
        raise tf.errors.UnknownError(exc.node_def, exc.op,
                                     f"{LAYOUT_MISMATCH_MESSAGE}: {exc.message}") from exc


def allgather(value: Any, tensor_name: Optional[str] = None) -> tf.Tensor:
    """Every instance's ``value`` stacked in instance order on a new dimension 0."""
    started()
    tensor = tf.convert_to_tensor(value)
    name = _collective_name("PopDistAllGather", value, tensor, tensor_name)
    return _layouts_checked(
        lambda: collectives.allgather(tf.expand_dims(tensor, 0), name=name))


def allreduce(value: Any, reduce_op: Any, tensor_name: Optional[str] = None) -> tf.Tensor:
    """``value`` reduced over all instances with ``reduce_op`` (``tf.distribute.ReduceOp.SUM`` or
    ``MEAN``; integers: the exact sum divided toward zero); every instance gets the result."""
    started()
    op = horovod_op(None, reduce_op)
    tensor = tf.convert_to_tensor(value)
    name = _collective_name("PopDistAllReduce", value, tensor, tensor_name)
    return _layouts_checked(lambda: collectives.allreduce(tensor, op=op, name=name))


def broadcast(value: Any, root_rank: int = 0, tensor_name: Optional[str] = None) -> tf.Tensor:
    """Instance ``root_rank``'s ``value``, on every instance."""
    started()
    tensor = tf.convert_to_tensor(value)
    name = _collective_name("PopDistBroadcast", value, tensor, tensor_name)
    return _layouts_checked(
        lambda: collectives.broadcast(tensor, root_rank=root_rank, name=name))


__all__ = ["allgather", "allreduce", "broadcast"]
