"""``ipu.ipu_compiler``: ``compile(computation, inputs)``. On an IPU it compiles the function with
XLA into one Poplar program; here it builds (graph mode) or runs (eager) the function in place and
returns its outputs in the shape Graphcore's returns them."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import tensorflow as tf


def compile(computation: Callable, inputs: Optional[Sequence] = None):  # noqa: A001 (Graphcore's name)
    """Call ``computation(*inputs)``. Returns a list of its output tensors (a single output as a
    one-element list), with any operations it returned after the tensors run first; an op (a
    NoOp in graph mode, None in eager mode) when it returned nothing or only operations."""
    from popdist_launcher.ipu._loop_support import PROGRAM, GraphUpdates

    inputs = [] if inputs is None else list(inputs)
    updates = GraphUpdates()  # a TF1 graph's update ops made in it run with its outputs
    token = PROGRAM.set(object())
    try:
        result = computation(*inputs)
    finally:
        PROGRAM.reset(token)
    if _is_estimator_spec(result):
        raise ValueError("Your computation output contains an EstimatorSpec or IPUEstimatorSpec "
                         "object. When you use an IPUEstimator, it already handles all the "
                         "compilation and no manual call to compile() is needed.")
    outputs = ([] if result is None else list(result) if isinstance(result, (list, tuple))
               else [result])
    first_op = next((i for i, o in enumerate(outputs) if isinstance(o, tf.Operation)), len(outputs))
    tensors, operations = outputs[:first_op], outputs[first_op:]
    if not all(isinstance(o, tf.Operation) for o in operations):
        raise ValueError("computation must return zero or more tensors followed by zero or more "
                         "operations.")
    operations += updates.made()
    if not tensors:
        return None if tf.executing_eagerly() else tf.group(*operations)
    if operations:
        with tf.control_dependencies(operations):
            return [tf.nest.map_structure(tf.identity, t) for t in tensors]
    return [tf.nest.map_structure(tf.convert_to_tensor, t) for t in tensors]


def _is_estimator_spec(value: Any) -> bool:
    if type(value).__name__ in ("EstimatorSpec", "IPUEstimatorSpec"):
        return True
    return isinstance(value, (list, tuple)) and any(_is_estimator_spec(v) for v in value)
