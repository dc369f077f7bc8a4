"""Each collective under the stall watchdog: eager calls timed directly (a failure re-raised
naming the collective), tf.functions through counters that ops update, Session graphs through
Python callbacks."""
from __future__ import annotations

import functools
import itertools
import re
import uuid
import weakref
from typing import Callable, List, Optional, TypeVar, Union

import numpy as np
import tensorflow as tf

from popdist_launcher.collectives import _state
from popdist_launcher.collectives._describe import EagerCall
from popdist_launcher.collectives._watchdog import ProbeValues

T = TypeVar("T")

_graph_keys = itertools.count(1)
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def _explain(exc: tf.errors.OpError, description: object, token: Optional[int]) -> Exception:
    """The error to raise for a failed eager collective: it names the collective."""
    st = _state.current()
    wd = _state.current_watchdog()
    horovod_said = _FUNCTION_NODE.sub("", exc.message)
    stall = wd.stall_message(token) if wd is not None else None
    if stall is None and st.failure is not None:
        stall = st.failure
    if stall is not None:
        if wd is not None:  # let the watchdog finish shutting Horovod down first
            wd.wait_stopped(_state.STOP_WAIT_SECONDS)
        return tf.errors.DeadlineExceededError(
            None, None, f"{description} did not complete: {stall} (Horovod: {horovod_said})")
    message = f"{description} failed on instance {st.rank} of {st.size}: {horovod_said}"
    try:
        return type(exc)(exc.node_def, exc.op, message)
    except Exception:  # an OpError subclass with another constructor
        return tf.errors.UnknownError(exc.node_def, exc.op, message)


# Three ways to tell the watchdog (_watchdog.py) that a collective is pending, by where it runs:
#
# * eager: begin()/end() around the call, plain Python;
# * a tf.function run eagerly: counters and times in a small resource variable that ops in the
#   function update (no Python runs in the step) and the watchdog thread reads;
# * a graph run by a Session (also inside its tf.while_loop/cond bodies): the Session owns the
#   graph's resources, so the watchdog cannot read them; two Python callbacks mark the call.
#
# In a graph, each Horovod op takes (one of) its inputs through a gate that waits for the begin
# mark: a stateful pass-through op (Print that never prints). Besides ordering the mark first,
# it stops Grappler from constant-folding the collective (Horovod's ops are not stateful): it
# would otherwise run Horovod ops with constant inputs while optimizing the graph, before any
# mark, where a stall blocks the Session.run or tf.function call unseen.

_COUNTER_PREFIX = f"popdist_collective_progress_{uuid.uuid4().hex[:12]}_"
_INT64_ONE = np.array([1], np.int64)

try:  # tracing a function for a SavedModel: it is not run, and must capture no untracked resource
    from tensorflow.python.saved_model import save_context as _save_context
except ImportError:  # pragma: no cover (TensorFlow moved it)
    _save_context = None


def _saving() -> bool:
    return _save_context is not None and _save_context.in_save_context()


def _runs_every_stateful_op() -> bool:
    """Whether the graph being built runs its stateful ops even when no output depends on them
    (tf.function's automatic control dependencies: tf.function, tf.while_loop/cond bodies);
    not a Session graph, nor tf.compat.v1.wrap_function, which prune them."""
    return bool(getattr(tf.compat.v1.get_default_graph(), "_add_control_dependencies", False))


def _after(mark: tf.Operation, out: T) -> T:
    """``out`` (a structure of tensors), each through an identity that waits for ``mark``."""
    flat = tf.nest.flatten(out, expand_composites=True)
    with tf.control_dependencies([mark]):
        flat = [tf.identity(t) for t in flat]
    return tf.nest.pack_sequence_as(out, flat, expand_composites=True)


def _outermost_is_eager() -> bool:
    """Whether the graph being built belongs to a tf.function that eager code will call (not to
    a graph that a Session runs)."""
    with tf.init_scope():
        return tf.executing_eagerly()


_BEGUN, _ENDED, _BEGUN_AT, _ENDED_AT = range(4)  # the counter's slots (times: wall-clock µs)


def _read_counter(ref: "weakref.ReferenceType[tf.Tensor]", shared_name: str) -> ProbeValues:
    """The watchdog thread's reader of one counter. Once the function that captured it is gone,
    the last values are read and the resource is freed."""
    handle = ref()
    gone = handle is None
    if gone:
        with tf.device("/device:CPU:0"):
            handle = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[4], shared_name=shared_name)
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64).numpy()
            tf.raw_ops.DestroyResourceOp(resource=handle, ignore_lookup_error=True)
    else:
        value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64).numpy()
    return ProbeValues(int(value[_BEGUN]), int(value[_ENDED]), value[_BEGUN_AT] / 1e6,
                       value[_ENDED_AT] / 1e6, gone)


def _new_counter(description: str) -> tf.Tensor:
    """An int64[4] resource variable (runs begun, number of the last run that ended, when the
    latest run began, when the latest completion happened), made eagerly while the function is
    traced; the function captures its handle. A raw resource, not a tf.Variable: nothing
    tracks, checkpoints or watches it on a tape. The watchdog holds it weakly, so it goes with
    the function."""
    shared_name = f"{_COUNTER_PREFIX}{next(_graph_keys)}"
    with tf.init_scope(), tf.device("/device:CPU:0"):
        handle = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[4], shared_name=shared_name)
        tf.raw_ops.AssignVariableOp(resource=handle, value=tf.zeros([4], tf.int64))
    _state.PROBES.add(description, functools.partial(_read_counter, weakref.ref(handle),
                                                     shared_name))
    return handle


def _gate(tensor: tf.Tensor, data: List[tf.Tensor]) -> tf.Tensor:
    """``tensor``, once ``data`` exists (see above)."""
    return tf.raw_ops.Print(input=tensor, data=data, message="", first_n=0,
                            name="collective_gate")


def _with_gates(inputs: List[tf.Tensor], gated: int, data: List[tf.Tensor]) -> List[tf.Tensor]:
    return [_gate(t, data) if i < gated else t for i, t in enumerate(inputs)]


def _now_us() -> tf.Tensor:
    """The wall-clock time in microseconds, as an int64[1]."""
    return tf.reshape(tf.cast(tf.timestamp() * 1e6, tf.int64), [1])


# The time stamps run in small functions that take the counter's handle: tf.function's automatic
# control dependencies chain every stateful op that takes no resource (tf.timestamp is one) in
# program order, which would make each collective wait for the previous one's end; a call that
# takes the handle is ordered only against the ops on that counter.
@tf.function(input_signature=[tf.TensorSpec([], tf.resource)], autograph=False)
def _stamp_begin(handle: tf.Tensor) -> tf.Tensor:
    now = _now_us()
    tf.raw_ops.ResourceScatterMax(resource=handle, indices=[_BEGUN_AT], updates=now)
    return now


@tf.function(input_signature=[tf.TensorSpec([], tf.resource), tf.TensorSpec([1], tf.int64)],
             autograph=False)
def _stamp_end(handle: tf.Tensor, run: tf.Tensor) -> tf.Tensor:
    now = _now_us()
    tf.raw_ops.ResourceScatterMax(resource=handle, indices=[_ENDED, _ENDED_AT],
                                  updates=tf.concat([run, now], 0))
    return now


def _counted(description: str, inputs: List[tf.Tensor], gated: int,
             build: Callable[[List[tf.Tensor]], T]) -> T:
    """A collective in a tf.function: counters, no Python. Once the inputs are ready the run
    number n = ++begun is taken and the time stamped; the gates wait for both; once the
    outputs are ready ended = max(ended, n) and the completion time is stamped. The watchdog
    orders pending and completed collectives by these times, not by when it happened to poll:
    a run left pending by a step that an error aborted began before any later completion, so
    it is not named in place of what the instance waits on. The outputs do not wait for the
    end mark (the function's return does, as for every stateful op; in a graph that would
    prune it they do), and each collective has its own counters, so the marks order nothing
    else: collectives of one function do not wait for each other."""
    handle = _new_counter(description)
    with tf.control_dependencies(inputs):
        begun = tf.raw_ops.ResourceScatterAdd(resource=handle, indices=[_BEGUN],
                                              updates=_INT64_ONE, name="collective_begin")
    with tf.control_dependencies([begun]):
        stamped = _stamp_begin(handle)
    with tf.control_dependencies([stamped]):
        run = tf.raw_ops.ResourceGather(resource=handle, indices=[_BEGUN], dtype=tf.int64,
                                        name="collective_run")
    # The handle in the gate: a stateful op on a resource is ordered by tf.function's automatic
    # control dependencies only against ops on that resource.
    out = build(_with_gates(inputs, gated, [run, handle]))
    with tf.control_dependencies(tf.nest.flatten(out, expand_composites=True)):
        end = tf.identity(_stamp_end(handle, run), name="collective_end")
    return out if _runs_every_stateful_op() else _after(end.op, out)


def _graph_begin(description: str, key: int, *_resource) -> np.int64:
    wd = _state.current_watchdog()
    return np.int64(wd.begin(description, key=key, in_graph=True) if wd is not None else 0)


def _graph_end(token: np.ndarray, *_resource) -> np.int64:
    wd = _state.current_watchdog()
    if wd is not None:
        wd.end(int(token))
    return np.int64(0)


def _private_resource(key: int) -> tf.Tensor:
    """A resource no other op uses: a stateful op that takes one is ordered by tf.function's
    automatic control dependencies only against ops on that resource, so the marks never
    serialize unrelated collectives. A mutex, not a variable handle: code that walks graphs for
    variables (tf.custom_gradient) must not mistake it for one."""
    with tf.control_dependencies(None):
        return tf.raw_ops.MutexV2(shared_name=f"popdist_collective_marks_{key}",
                                  name="collective_marks_resource")


def _called_back(description: str, inputs: List[tf.Tensor], gated: int,
                 build: Callable[[List[tf.Tensor]], T]) -> T:
    """A collective in a graph run by a Session: a Python callback marks it begun once the
    inputs are ready, the gates wait for it, another marks it ended once the outputs are ready,
    and, in the graph's top level, the outputs returned wait for that one (else the Session
    would not run it)."""
    key = next(_graph_keys)
    in_function = getattr(tf.compat.v1.get_default_graph(), "building_function", False)
    extra = [_private_resource(key)] if in_function else []  # a tf.while_loop/cond body
    with tf.control_dependencies(inputs):
        begin = tf.numpy_function(functools.partial(_graph_begin, description, key), extra,
                                  tf.int64, name="collective_begin")
    out = build(_with_gates(inputs, gated, [begin] + extra))
    with tf.control_dependencies(tf.nest.flatten(out, expand_composites=True)):
        end = tf.numpy_function(_graph_end, [begin] + extra, tf.int64, name="collective_end")
    return out if _runs_every_stateful_op() else _after(end.op, out)


def tracked(description: Union[str, EagerCall], inputs: List[tf.Tensor],
            build: Callable[[List[tf.Tensor]], T], gated: Optional[int] = None) -> T:
    """Run ``build(inputs)`` (which creates the Horovod ops) under the stall watchdog.

    ``gated``: how many leading inputs feed Horovod ops (default all); each Horovod op must take
    at least one of them. Eager: the call is timed directly and a failure is re-raised naming
    the collective. Graph: marks as described above.
    """
    wd = _state.current_watchdog()
    if tf.executing_eagerly():
        token = wd.begin(description) if wd is not None else None
        try:
            return build(inputs)
        except tf.errors.OpError as exc:
            raise _explain(exc, description, token) from exc
        finally:
            if token is not None:
                wd.end(token)
    if wd is None or _saving():
        return build(inputs)
    gated = len(inputs) if gated is None else gated
    if getattr(tf.compat.v1.get_default_graph(), "building_function", False) \
            and _outermost_is_eager():
        return _counted(str(description), inputs, gated, build)
    return _called_back(str(description), inputs, gated, build)

