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


class GraphUpdates:
    """The update ops (``tf.compat.v1.GraphKeys.UPDATE_OPS``: batch-norm moving statistics) a
    compiled computation adds to a TF1 graph, in its own control-flow context. On an IPU the
    computation is one program that runs them; here its outputs wait for them."""

    def __init__(self) -> None:
        from tensorflow.python.framework import func_graph
        graph = tf.compat.v1.get_default_graph()
        self._graph = None
        if not tf.executing_eagerly() and not isinstance(graph, func_graph.FuncGraph):
            self._graph = graph
            self._context = graph._get_control_flow_context()  # noqa: SLF001
            self._before = len(graph.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))

    def made(self) -> list:
        """The operations of the update ops added since construction (none outside TF1 graphs)."""
        if self._graph is None:
            return []
        added = self._graph.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)[self._before:]
        ops = [u if isinstance(u, tf.Operation) else u.op for u in added]
        return [op for op in ops
                if op._get_control_flow_context() is self._context]  # noqa: SLF001
