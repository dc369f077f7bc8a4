"""What the loops, the feeds, the pipelines and the compiler share: the ``ipu_compiler.compile``
call being built, a loop body's arguments from an infeed element, and this replica's place
among the instance's replicas."""
from __future__ import annotations

import contextvars
from typing import Any, Tuple

import tensorflow as tf

# The ipu_compiler.compile call being built (graph mode), which orders its loops on one infeed.
PROGRAM: contextvars.ContextVar = contextvars.ContextVar("ipu_program", default=None)


def as_list(values: Any) -> list:
    """``values`` as a list (a list or tuple's items, else the one value)."""
    return list(values) if isinstance(values, (list, tuple)) else [values]


def body_arguments(element: Any) -> Tuple[list, dict]:
    """An infeed element as loop-body arguments: a dict with string keys becomes keyword
    arguments, anything else positional ones."""
    element = as_list(element)
    if (len(element) == 1 and isinstance(element[0], dict)
            and all(isinstance(k, str) for k in element[0])):
        return [], dict(element[0])
    return element, {}


def local_replica() -> Tuple[int, int]:
    """(this replica's index among the instance's replicas, how many there are); (0, 1) outside
    ``strategy.run`` of a strategy with several local replicas."""
    context = tf.distribute.get_replica_context() if tf.distribute.has_strategy() else None
    if context is None:
        return 0, 1
    # A replica of a pipelined Keras model may span several devices (keras.extensions.replicas).
    span = getattr(context.strategy.extended, "replica_span", 1)
    replicas = len(context.strategy.extended.worker_devices) // span
    device = int(context._replica_id)  # noqa: SLF001 (the local id, a Python int)
    if device % span:  # a replica's other devices enqueue nothing
        return -1, replicas
    if replicas == 1:
        return 0, 1
    return device // span, replicas
