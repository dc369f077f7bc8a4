"""What the loops, the feeds, the pipelines and the compiler share: the ``ipu_compiler.compile``
call being built (and, when it is replicated, the replica being built), a loop body's arguments
from an infeed element, and this replica's place among the instance's replicas."""
from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Tuple

import tensorflow as tf

# The ipu_compiler.compile call being built (graph mode), which orders its loops on one infeed.
PROGRAM: contextvars.ContextVar = contextvars.ContextVar("ipu_program", default=None)


@dataclasses.dataclass(frozen=True)
class ProgramReplica:
    """One replica of an ``ipu_compiler.compile`` program being built (TF1 graphs): its index,
    how many replicas the program has, the program (``ipu._replicated_compile.Program``), which
    carries what its collectives exchange through, and whether the program is provisional
    (built before the program configured its IPU system, to be rebuilt when it does)."""

    index: int
    count: int
    program: Any
    provisional: bool = False


# The replica of a replicated compile() being built, outside any strategy (see ProgramReplica).
REPLICA: contextvars.ContextVar = contextvars.ContextVar("ipu_program_replica", default=None)


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
    """(this replica's index among the instance's replicas, how many there are): the replica of
    a replicated ``ipu_compiler.compile`` program being built, or of ``strategy.run`` of a
    strategy with several local replicas; (0, 1) elsewhere."""
    program_replica = REPLICA.get()
    if program_replica is not None:
        return program_replica.index, program_replica.count
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
