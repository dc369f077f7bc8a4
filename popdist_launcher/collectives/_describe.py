"""The reduction ops a collective takes, and how a collective is named: the Horovod op name
(graph mode pairs collectives across instances by it) and the description errors give."""
from __future__ import annotations

import itertools
import re
from typing import Any, Optional, Sequence, Union

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

Average = hvd.Average
Sum = hvd.Sum
Min = hvd.Min
Max = hvd.Max
Product = hvd.Product

OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

TensorLike = Union[tf.Tensor, tf.Variable, tf.IndexedSlices, np.ndarray, float, int, Sequence]

_eager_calls = itertools.count(1)  # eager collectives pair up by call order, so a number names one


def check_op(op: Any) -> Any:
    """``op``, or Average for None; ValueError for anything but the five reduction ops."""
    if op is None:
        return Average
    if op not in OP_NAMES:
        raise ValueError(f"op {op!r} is not supported; use one of popdist_launcher.collectives."
                         f"Average, Sum, Min, Max or Product.")
    return op


def op_name(name: Optional[str]) -> Optional[str]:
    """A valid TensorFlow op name derived from ``name`` (graph mode matches collectives by it)."""
    if name is None:
        return None
    cleaned = re.sub(r"[^A-Za-z0-9_.\-/]", "_", str(name))
    return cleaned if re.match(r"[A-Za-z0-9.]", cleaned) else f"c{cleaned}"


def suffixed(name: Optional[str], suffix: str) -> Optional[str]:
    return None if name is None else f"{name}_{suffix}"


def _shape_text(shape: tf.TensorShape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape.as_list()) + "]" \
        if shape.rank is not None else "[...]"


class EagerCall:
    """The description of an unnamed eager collective, formatted only when a message needs it
    (most calls never do)."""

    __slots__ = ("kind", "number", "dtype", "shape", "more")

    def __init__(self, kind: str, tensor: tf.Tensor, more: int) -> None:
        self.kind, self.number, self.more = kind, next(_eager_calls), more
        self.dtype, self.shape = tensor.dtype, tensor.shape

    def __str__(self) -> str:
        text = f"{self.kind} #{self.number} of a {self.dtype.name}{_shape_text(self.shape)} tensor"
        return text + (f" (+{self.more} more)" if self.more else "")


def describe(kind: str, name: Optional[str], tensor: Optional[tf.Tensor], more: int = 0
             ) -> Union[str, EagerCall]:
    """How errors name the collective: its name, else the eager call's number, else the tensor
    (``more``: how many more tensors a grouped call reduces)."""
    if name is not None:
        return f"{kind} '{name}'"
    if tensor is None:
        return kind
    if tf.executing_eagerly():
        return EagerCall(kind, tensor, more)
    return f"{kind} of tensor '{tensor.name}'" + (f" (+{more} more)" if more else "")


def horovod_name(prefix: str, name: Optional[str], tensor: tf.Tensor) -> Optional[str]:
    """The Horovod op name: graph mode matches collectives across instances by it."""
    if name is not None:
        return op_name(name)
    if tf.executing_eagerly():
        return None  # eager collectives pair up by call order; Horovod ignores names there
    return f"{prefix}_{re.sub('[^A-Za-z0-9_]', '_', tensor.name)}"
