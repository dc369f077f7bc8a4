"""allreduce and grouped_allreduce: dense tensors reduced by Horovod (integers exactly, small
integer types through a wider one), tf.IndexedSlices gathered."""
from __future__ import annotations

import functools
from typing import Any, Dict, Iterable, List, Optional, Union

import horovod.tensorflow as hvd
import tensorflow as tf

from popdist_launcher.collectives import _state
from popdist_launcher.collectives._describe import (OP_NAMES, Average, Sum, TensorLike, check_op,
                                                    describe, horovod_name, suffixed)
from popdist_launcher.collectives._tracking import tracked


# Integer dtypes Horovod's allreduce kernel does not take (it takes uint8, int8, int32, int64
# and the float types): reduced exactly in a wider one and cast back (a Sum that overflows
# wraps, as it would in the dtype itself).
_WIDER = {tf.int16: tf.int32, tf.uint16: tf.int32, tf.uint32: tf.int64}


def _is_int(dtype: tf.DType) -> bool:
    return dtype.is_integer and dtype != tf.bool


def _integral(factor: float, what: str, dtype: tf.DType) -> int:
    if float(factor) != int(factor):
        raise ValueError(
            f"{what}={factor!r} cannot scale a {dtype.name} tensor exactly; use an integral factor "
            f"(e.g. 2.0) or cast the tensor to a floating-point dtype first.")
    return int(factor)


def _to_tensor(value: Any) -> Union[tf.Tensor, tf.IndexedSlices]:
    if isinstance(value, tf.IndexedSlices):
        return value
    return tf.convert_to_tensor(value)


def _dense_allreduce(tensor: tf.Tensor, op: Any, prescale: float, postscale: float,
                     name: Optional[str], size: int) -> tf.Tensor:
    if tensor.dtype in _WIDER:
        wide = tf.cast(tensor, _WIDER[tensor.dtype])
        return tf.cast(_dense_allreduce(wide, op, prescale, postscale, name, size), tensor.dtype)
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
    gathered_values = hvd.allgather(values, name=suffixed(name, "values"))
    gathered_indices = hvd.allgather(indices, name=suffixed(name, "indices"))
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
    and the dtype is kept (int16 and uint16 are reduced as int32, which Horovod takes); scale
    factors must be integral (2.0 is fine, 0.5 raises ValueError) and are applied exactly.

    A ``tf.IndexedSlices`` is allgathered (values and indices concatenated in instance order,
    dense_shape kept) and returned as IndexedSlices; Average divides the values by the number of
    instances; only Sum and Average are allowed.
    """
    st = _state.require()
    op = check_op(op)
    value = _to_tensor(tensor)
    if isinstance(value, tf.IndexedSlices):
        if op not in (Sum, Average):
            raise ValueError(
                f"allreduce of tf.IndexedSlices supports only Sum and Average (the slices are "
                f"gathered), not {OP_NAMES[op]}; convert it to a dense tensor first "
                f"(tf.convert_to_tensor).")
        description = describe("allreduce", name, value.values)
        op_name = horovod_name("HorovodAllgather", name, value.values)
        inputs = [value.values, value.indices]
        if value.dense_shape is not None:
            inputs.append(tf.convert_to_tensor(value.dense_shape))
        return tracked(description, inputs, lambda gated: _sparse_allreduce(
            tf.IndexedSlices(*gated), op, prescale_factor, postscale_factor, op_name, st.size),
            gated=2)  # values and indices: two allgathers
    description = describe("allreduce", name, value)
    op_name = horovod_name("HorovodAllreduce", name, value)
    return tracked(description, [value], lambda gated: _dense_allreduce(
        gated[0], op, prescale_factor, postscale_factor, op_name, st.size))


def grouped_allreduce(tensors: Iterable[TensorLike], op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0, name: Optional[str] = None
                      ) -> List[Union[tf.Tensor, tf.IndexedSlices]]:
    """allreduce() of a list of tensors (e.g. gradients) in as few Horovod operations as possible.

    Dense tensors of one dtype go through one ``hvd.grouped_allreduce``; IndexedSlices are
    gathered one by one. Same semantics per tensor as allreduce(); results in input order.
    """
    st = _state.require()
    op = check_op(op)
    values = [_to_tensor(t) for t in tensors]
    results: List[Any] = [None] * len(values)
    by_dtype: Dict[tf.DType, List[int]] = {}
    for i, value in enumerate(values):
        if isinstance(value, tf.IndexedSlices):
            results[i] = allreduce(value, op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor,
                                   name=suffixed(name, f"sparse_{i}"))
        else:
            by_dtype.setdefault(value.dtype, []).append(i)
    for dtype, positions in by_dtype.items():
        group = [values[i] for i in positions]
        group_name = name if len(by_dtype) == 1 else suffixed(name, dtype.name)
        description = describe("grouped_allreduce", group_name, group[0],
                                more=len(group) - 1 if name is None else 0)
        op_name = horovod_name("HorovodGroupedAllreduce", group_name, group[0])
        reduced = tracked(description, group, functools.partial(
            _grouped_dense, op=op, prescale=prescale_factor, postscale=postscale_factor,
            name=op_name, size=st.size), gated=1)  # one Horovod op takes them all
        for i, out in zip(positions, reduced):
            results[i] = out
    return results


def _grouped_dense(group: List[tf.Tensor], op: Any, prescale: float, postscale: float,
                   name: Optional[str], size: int) -> List[tf.Tensor]:
    dtype = group[0].dtype
    if dtype in _WIDER:
        wide = [tf.cast(t, _WIDER[dtype]) for t in group]
        out = _grouped_dense(wide, op, prescale, postscale, name, size)
        return [tf.cast(t, dtype) for t in out]
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

