"""``ipu.ipu_compiler``: ``compile(computation, inputs)``. On an IPU it compiles the function with
XLA into one Poplar program, replicated over the IPUs the system selects; here it builds (graph
mode) or runs (eager) the function in place and returns its outputs in the shape Graphcore's
returns them. In a TF1 graph, outside any strategy, a system of several replicas (IPUConfig's
``auto_select_ipus`` or ``select_ipus`` over the IPUs a replica spans) runs the program as that
many replicas in this process (see ``ipu._replicated_compile``)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import tensorflow as tf

from popdist_launcher.ipu import _replicated_compile


def compile(computation: Callable, inputs: Optional[Sequence] = None):  # noqa: A001 (Graphcore's name)
    """Call ``computation(*inputs)``. Returns a list of its output tensors (a single output as a
    one-element list), with any operations it returned after the tensors run first; an op (a
    NoOp in graph mode, None in eager mode) when it returned nothing or only operations. In a
    TF1 graph, outside any strategy, it runs as the replicas the configured IPU system selects
    (also when the system is configured after the graph is built) and returns replica 0's
    outputs, as Graphcore's.

    Running any output runs every replica; inputs (placeholders, variables) reach every replica
    as they are; each replica reads its own infeed elements, enqueues into its own outfeed queue
    and trains its own copy of the variables (see ``ipu._replicated_compile``)."""
    from popdist_launcher.ipu._loop_support import PROGRAM, GraphUpdates

    inputs = [] if inputs is None else list(inputs)
    if _replicated_compile.replicates_here():
        replicas, provisional = _replicated_compile.program_replicas()
        return _replicated_compile.Program(computation, inputs).build(replicas, provisional)
    updates = GraphUpdates()  # a TF1 graph's update ops made in it run with its outputs
    token = PROGRAM.set(object())
    try:
        result = computation(*inputs)
    finally:
        PROGRAM.reset(token)
    tensors, operations = _replicated_compile.split_outputs(result)
    operations += updates.made()
    if not tensors:
        return None if tf.executing_eagerly() else tf.group(*operations)
    if operations:
        with tf.control_dependencies(operations):
            return [tf.nest.map_structure(tf.identity, t) for t in tensors]
    return [tf.nest.map_structure(tf.convert_to_tensor, t) for t in tensors]
