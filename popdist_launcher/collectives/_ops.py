"""The collectives (allreduce, grouped_allreduce, allgather, broadcast...) on Horovod's TF ops."""
from __future__ import annotations

import functools
import itertools
import re
import uuid
import weakref
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence, TypeVar,
                    Union)

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from popdist_launcher.collectives import _state
from popdist_launcher.collectives._watchdog import ProbeValues

Average = hvd.Average
Sum = hvd.Sum
Min = hvd.Min
Max = hvd.Max
Product = hvd.Product

_OPS = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

TensorLike = Union[tf.Tensor, tf.Variable, tf.IndexedSlices, np.ndarray, float, int, Sequence]
T = TypeVar("T")

_eager_calls = itertools.count(1)  # eager collectives pair up by call order, so a number names one
_graph_keys = itertools.count(1)
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


# ---- helpers -----------------------------------------------------------------------------------
def _check_op(op: Any) -> Any:
    if op is None:
        return Average
    if op not in _OPS:
        raise ValueError(f"op {op!r} is not supported; use one of popdist_launcher.collectives."
                         f"Average, Sum, Min, Max or Product.")
    return op


def _op_name(name: Optional[str]) -> Optional[str]:
    """A valid TensorFlow op name derived from ``name`` (graph mode matches collectives by it)."""
    if name is None:
        return None
    cleaned = re.sub(r"[^A-Za-z0-9_.\-/]", "_", str(name))
    return cleaned if re.match(r"[A-Za-z0-9.]", cleaned) else f"c{cleaned}"


def _suffixed(name: Optional[str], suffix: str) -> Optional[str]:
    return None if name is None else f"{name}_{suffix}"


def _is_int(dtype: tf.DType) -> bool:
    return dtype.is_integer and dtype != tf.bool


def _integral(factor: float, what: str, dtype: tf.DType) -> int:
    if float(factor) != int(factor):
        raise ValueError(
            f"{what}={factor!r} cannot scale a {dtype.name} tensor exactly; use an integral factor "
            f"(e.g. 2.0) or cast the tensor to a floating-point dtype first.")
    return int(factor)


def _shape_text(shape: tf.TensorShape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape.as_list()) + "]" \
        if shape.rank is not None else "[...]"


class _EagerCall:
    """The description of an unnamed eager collective, formatted only when a message needs it
    (most calls never do)."""

    __slots__ = ("kind", "number", "dtype", "shape", "more")

    def __init__(self, kind: str, tensor: tf.Tensor, more: int) -> None:
        self.kind, self.number, self.more = kind, next(_eager_calls), more
        self.dtype, self.shape = tensor.dtype, tensor.shape

    def __str__(self) -> str:
        text = f"{self.kind} #{self.number} of a {self.dtype.name}{_shape_text(self.shape)} tensor"
        return text + (f" (+{self.more} more)" if self.more else "")


def _describe(kind: str, name: Optional[str], tensor: Optional[tf.Tensor], more: int = 0
              ) -> Union[str, _EagerCall]:
    """How errors name the collective: its name, else the eager call's number, else the tensor
    (``more``: how many more tensors a grouped call reduces)."""
    if name is not None:
        return f"{kind} '{name}'"
    if tensor is None:
        return kind
    if tf.executing_eagerly():
        return _EagerCall(kind, tensor, more)
    return f"{kind} of tensor '{tensor.name}'" + (f" (+{more} more)" if more else "")


def _explain(exc: tf.errors.OpError, description: object, token: Optional[int]) -> Exception:
    """The error to raise for a failed eager collective: it names the collective."""
    st = _state._state
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


# ---- stall marks --------------------------------------------------------------------------------
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


def _tracked(description: Union[str, _EagerCall], inputs: List[tf.Tensor],
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


def _horovod_name(prefix: str, name: Optional[str], tensor: tf.Tensor) -> Optional[str]:
    """The Horovod op name: graph mode matches collectives across instances by it."""
    if name is not None:
        return _op_name(name)
    if tf.executing_eagerly():
        return None  # eager collectives pair up by call order; Horovod ignores names there
    return f"{prefix}_{re.sub('[^A-Za-z0-9_]', '_', tensor.name)}"


def _to_tensor(value: Any) -> Union[tf.Tensor, tf.IndexedSlices]:
    if isinstance(value, tf.IndexedSlices):
        return value
    return tf.convert_to_tensor(value)


# ---- dense and sparse allreduce -----------------------------------------------------------------
def _dense_allreduce(tensor: tf.Tensor, op: Any, prescale: float, postscale: float,
                     name: Optional[str], size: int) -> tf.Tensor:
    if not _is_int(tensor.dtype):
        return hvd.allreduce(tensor, op=op, prescale_factor=prescale, postscale_factor=postscale,
                             name=name)
    pre = _integral(prescale, "prescale_factor", tensor.dtype)
    post = _integral(postscale, "postscale_factor", tensor.dtype)
    if pre != 1:
        tensor = tensor * tf.constant(pre, tensor.dtype)
    out = hvd.allreduce(tensor, op=Sum if op == Average else op, name=name)
    if op == Average:
        out = tf.truncatediv(out, tf.constant(size, out.dtype))
    if post != 1:
        out = out * tf.constant(post, out.dtype)
    return out


def _sparse_allreduce(slices: tf.IndexedSlices, op: Any, prescale: float, postscale: float,
                      name: Optional[str], size: int) -> tf.IndexedSlices:
    values, indices = slices.values, slices.indices
    dtype = values.dtype
    if _is_int(dtype):
        pre = _integral(prescale, "prescale_factor", dtype)
        post = _integral(postscale, "postscale_factor", dtype)
        if pre != 1:
            values = values * tf.constant(pre, dtype)
    gathered_values = hvd.allgather(values, name=_suffixed(name, "values"))
    gathered_indices = hvd.allgather(indices, name=_suffixed(name, "indices"))
    if _is_int(dtype):
        if op == Average:
            gathered_values = tf.truncatediv(gathered_values, tf.constant(size, dtype))
        if post != 1:
            gathered_values = gathered_values * tf.constant(post, dtype)
    else:
        if prescale * postscale != 1.0:
            gathered_values = gathered_values * tf.cast(prescale * postscale, dtype)
        if op == Average:
            gathered_values = gathered_values / tf.cast(size, dtype)
    return tf.IndexedSlices(gathered_values, gathered_indices, dense_shape=slices.dense_shape)


def allreduce(tensor: TensorLike, op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, name: Optional[str] = None
              ) -> Union[tf.Tensor, tf.IndexedSlices]:
    """Reduce ``tensor`` over all instances; every instance gets the result.

    ``op``: Average (default), Sum, Min, Max or Product. The result is
    ``postscale_factor * reduce(prescale_factor * tensor)``. Shapes and dtypes must match on
    every instance (a mismatch raises on every instance, naming the collective). ``name``
    labels the collective in errors; in graph mode (tf.function, Session) instances also match
    collectives by it (default: derived from the tensor's name), while in eager mode Horovod
    pairs collectives by call order only.

    Integer tensors: Average is the exact integer Sum divided by the number of instances,
    rounded toward zero (``tf.truncatediv``; e.g. 3 and 4 average to 3, -3 and -4 to -3),
    and the dtype is kept; scale factors must be integral (2.0 is fine, 0.5 raises ValueError)
    and are applied exactly.

    A ``tf.IndexedSlices`` is allgathered (values and indices concatenated in instance order,
    dense_shape kept) and returned as IndexedSlices; Average divides the values by the number of
    instances; only Sum and Average are allowed.
    """
    st = _state.require()
    op = _check_op(op)
    value = _to_tensor(tensor)
    if isinstance(value, tf.IndexedSlices):
        if op not in (Sum, Average):
            raise ValueError(
                f"allreduce of tf.IndexedSlices supports only Sum and Average (the slices are "
                f"gathered), not {_OPS[op]}; convert it to a dense tensor first "
                f"(tf.convert_to_tensor).")
        description = _describe("allreduce", name, value.values)
        op_name = _horovod_name("HorovodAllgather", name, value.values)
        inputs = [value.values, value.indices]
        if value.dense_shape is not None:
            inputs.append(tf.convert_to_tensor(value.dense_shape))
        return _tracked(description, inputs, lambda gated: _sparse_allreduce(
            tf.IndexedSlices(*gated), op, prescale_factor, postscale_factor, op_name, st.size),
            gated=2)  # values and indices: two allgathers
    description = _describe("allreduce", name, value)
    op_name = _horovod_name("HorovodAllreduce", name, value)
    return _tracked(description, [value], lambda gated: _dense_allreduce(
        gated[0], op, prescale_factor, postscale_factor, op_name, st.size))


def grouped_allreduce(tensors: Iterable[TensorLike], op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0, name: Optional[str] = None
                      ) -> List[Union[tf.Tensor, tf.IndexedSlices]]:
    """allreduce() of a list of tensors (e.g. gradients) in as few Horovod operations as possible.

    Dense tensors of one dtype go through one ``hvd.grouped_allreduce``; IndexedSlices are
    gathered one by one. Same semantics per tensor as allreduce(); results in input order.
    """
    st = _state.require()
    op = _check_op(op)
    values = [_to_tensor(t) for t in tensors]
    results: List[Any] = [None] * len(values)
    by_dtype: Dict[tf.DType, List[int]] = {}
    for i, value in enumerate(values):
        if isinstance(value, tf.IndexedSlices):
            results[i] = allreduce(value, op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor,
                                   name=_suffixed(name, f"sparse_{i}"))
        else:
            by_dtype.setdefault(value.dtype, []).append(i)
    for dtype, positions in by_dtype.items():
        group = [values[i] for i in positions]
        group_name = name if len(by_dtype) == 1 else _suffixed(name, dtype.name)
        description = _describe("grouped_allreduce", group_name, group[0],
                                more=len(group) - 1 if name is None else 0)
        op_name = _horovod_name("HorovodGroupedAllreduce", group_name, group[0])
        reduced = _tracked(description, group, functools.partial(
            _grouped_dense, op=op, prescale=prescale_factor, postscale=postscale_factor,
            name=op_name, size=st.size), gated=1)  # one Horovod op takes them all
        for i, out in zip(positions, reduced):
            results[i] = out
    return results


def _grouped_dense(group: List[tf.Tensor], op: Any, prescale: float, postscale: float,
                   name: Optional[str], size: int) -> List[tf.Tensor]:
    dtype = group[0].dtype
    if not _is_int(dtype):
        return list(hvd.grouped_allreduce(group, op=op, prescale_factor=prescale,
                                          postscale_factor=postscale, name=name))
    pre = _integral(prescale, "prescale_factor", dtype)
    post = _integral(postscale, "postscale_factor", dtype)
    if pre != 1:
        group = [t * tf.constant(pre, dtype) for t in group]
    out = list(hvd.grouped_allreduce(group, op=Sum if op == Average else op, name=name))
    if op == Average:
        out = [tf.truncatediv(t, tf.constant(size, dtype)) for t in out]
    if post != 1:
        out = [t * tf.constant(post, dtype) for t in out]
    return out


# ---- allgather and broadcast --------------------------------------------------------------------
def allgather(tensor: TensorLike, name: Optional[str] = None) -> tf.Tensor:
    """Concatenate every instance's ``tensor`` along dimension 0, in instance order.

    The first dimension may differ between instances; the others and the dtype must match. A
    scalar is treated as a vector of one element, so gathering scalars gives a vector of size().
    """
    _state.require()
    value = tf.convert_to_tensor(tensor)
    description = _describe("allgather", name, value)
    op_name = _horovod_name("HorovodAllgather", name, value)
    if value.shape.rank == 0:
        value = tf.reshape(value, [1])
    return _tracked(description, [value], lambda gated: hvd.allgather(gated[0], name=op_name))


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
    description = _describe("broadcast", name, value)
    op_name = _horovod_name("HorovodBroadcast", name, value)
    return _tracked(description, [value],
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


def barrier(name: str = "barrier", members: Optional[Iterable[int]] = None) -> None:
    """Return once every instance has called ``barrier`` (a Sum allreduce of one integer, under
    the stall watchdog: an instance that never arrives fails the others with the stall error
    naming ``name``). Runs eagerly, also in a program in TensorFlow 1's graph mode.

    ``members``: wait for these instances only (a group made by ``register_group`` on every
    instance first; the others do not take part); None waits for every instance."""
    st = _state.require()
    process_set = hvd.global_process_set
    expected = st.size
    if members is not None:
        key = tuple(sorted(set(int(m) for m in members)))
        if st.rank not in key:
            raise ValueError(f"{name}: instance {st.rank} is not one of the instances "
                             f"{list(key)} this barrier waits for.")
        if len(key) < st.size:
            process_set, expected = _state.group(key), len(key)

    def one(gated: List[tf.Tensor]) -> tf.Tensor:
        return hvd.allreduce(gated[0], op=Sum, name=_op_name(name), process_set=process_set)

    def count() -> tf.Tensor:
        value = tf.constant(1, tf.int32)
        return _tracked(_describe("allreduce", name, value), [value], one)

    arrived = int(run_now(count))
    if arrived != expected:
        raise RuntimeError(f"{name}: {arrived} of {expected} instances arrived at the barrier.")
