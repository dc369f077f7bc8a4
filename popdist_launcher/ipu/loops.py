"""``ipu.loops``: ``repeat`` and ``while_loop``, a ``tf.while_loop`` whose body may take one
element of an IPUInfeedQueue per iteration (Graphcore's signatures and argument checks)."""
from __future__ import annotations

import inspect
from typing import Callable, Optional, Sequence

import tensorflow as tf

from popdist_launcher.ipu._loop_support import PROGRAM, as_list, body_arguments

def _arity_error(fn: Callable, num_args: int, infeed_queue=None) -> Optional[str]:
    """None when ``fn`` accepts ``num_args`` positional arguments plus the infeed's; otherwise
    what it needs instead."""
    args, kwargs = [None] * num_args, {}
    if infeed_queue is not None:
        more, kwargs = body_arguments(infeed_queue._structure)  # noqa: SLF001
        args += [None] * len(more)
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature (a builtin): let the call decide
        return None
    return None


def _check_body(body: Callable, inputs: list, infeed_queue) -> None:
    error = _arity_error(body, len(inputs), infeed_queue)
    if error is None:
        return
    if infeed_queue is None:
        raise TypeError(f"Supplied loop body function cannot be called with the specified inputs. "
                        f"You specified {len(inputs)} inputs: {inputs}, but the loop body "
                        f"needs another signature ({error}).")
    raise TypeError(f"Supplied loop body function cannot be called with the specified inputs. "
                    f"You specified {len(inputs)} inputs: {inputs} and "
                    f"{infeed_queue.number_of_tuple_elements} additional inputs from infeed, but "
                    f"the loop body needs another signature ({error}).")


def while_loop(condition: Callable, body: Callable, inputs: Optional[Sequence] = None,
               infeed_queue=None, maximum_iterations: Optional[int] = None,
               use_while_v1: bool = True):
    """Loop while ``condition(*carried)``; ``body(*carried, *infeed_element)`` returns the new
    carried values (tensors first, then any ops, which run every iteration). Returns the final
    carried values (one value unwrapped; with no inputs, the loop's op)."""
    inputs = [x if isinstance(x, tf.TensorArray) else tf.convert_to_tensor(x)
              for x in ([] if inputs is None else as_list(inputs))]
    arity = len(inputs)
    input_types = [x.dtype for x in inputs]
    _check_body(body, inputs, infeed_queue)
    if _arity_error(condition, arity) is not None:
        raise TypeError(f"Supplied loop condition function cannot be called with the specified "
                        f"inputs. You specified {arity} inputs: {inputs} (infeed elements are not "
                        f"passed to the condition).")

    def condition_wrapper(*carried):
        return condition(*(carried if arity else ()))

    def body_wrapper(*loop_values):
        carried = list(loop_values) if arity else []
        extra_args, extra_kwargs = [], {}
        if infeed_queue is not None:
            # Dequeue once the iteration has started (TF1 frames may otherwise run it early).
            with tf.control_dependencies([v for v in loop_values if tf.is_tensor(v)]):
                extra_args, extra_kwargs = body_arguments(infeed_queue._dequeue())  # noqa: SLF001
        outputs = body(*(carried + list(extra_args)), **extra_kwargs)
        outputs = [] if outputs is None else as_list(outputs)
        first_op = next((i for i, o in enumerate(outputs) if isinstance(o, tf.Operation)),
                        len(outputs))
        operations = outputs[first_op:]
        tensors = [o if isinstance(o, tf.TensorArray) else tf.convert_to_tensor(o)
                   for o in outputs[:first_op]]
        if not all(isinstance(o, tf.Operation) for o in operations):
            raise ValueError("IPU loop body must return zero or more Tensor values followed by "
                             "zero or more Operations.")
        output_types = [t.dtype for t in tensors]
        if output_types != input_types:
            raise TypeError(f"Mismatch between input types and output types for loop body: "
                            f"{input_types} vs {output_types}.")
        if not tensors:
            tensors = [tf.constant(0)]
        if operations:
            with tf.control_dependencies(operations):
                tensors = [t if isinstance(t, tf.TensorArray) else tf.identity(t) for t in tensors]
        return tensors

    loop_vars = inputs if arity else [tf.constant(0)]
    program = PROGRAM.get()
    previous = getattr(infeed_queue, "_last_loop", None)
    if program is not None and previous is not None and previous[0] is program:
        # Loops of one compiled program dequeue from an infeed in program order, as on an IPU.
        with tf.control_dependencies([previous[1]]):
            loop_vars = [v if isinstance(v, tf.TensorArray) else tf.identity(v) for v in loop_vars]
    # return_same_structure: TF1's control flow would pack a single loop value out of its list
    options = {"return_same_structure": True} if use_while_v1 else {}
    while_fn = tf.compat.v1.while_loop if use_while_v1 else tf.while_loop
    outputs = while_fn(condition_wrapper, body_wrapper, loop_vars,
                       maximum_iterations=maximum_iterations, parallel_iterations=1, **options)
    if infeed_queue is not None and program is not None:
        infeed_queue._last_loop = (program, as_list(outputs)[0])  # noqa: SLF001
    if infeed_queue is not None and not infeed_queue.dequeued:
        raise ValueError("The infeed queue has not been dequeued.")
    outputs = as_list(outputs)
    if arity == 0:
        return None if tf.executing_eagerly() else outputs[0].op
    return outputs[0] if len(outputs) == 1 else outputs


def repeat(n: int, body: Callable, inputs: Optional[Sequence] = None, infeed_queue=None,
           use_while_v1: bool = True):
    """Run ``body`` ``n`` times (Graphcore's ``loops.repeat``); see ``while_loop``."""
    inputs = [] if inputs is None else inputs
    _check_body(body, as_list(inputs), infeed_queue)
    return while_loop(lambda *_: True, body, inputs=inputs, infeed_queue=infeed_queue,
                      maximum_iterations=n, use_while_v1=use_while_v1)
