"""``ipu.outlined_function``: a Python function traced once into a reusable TensorFlow function
(a ``tf.function`` without AutoGraph, as Graphcore's outlined functions take no AutoGraph);
the sharding and layout hints steer the IPU compiler and change nothing here."""
from __future__ import annotations

import functools
from typing import Callable, Optional

import tensorflow as tf


def outlined_function(func: Optional[Callable] = None, unique_sharding: bool = False,
                      keep_input_layouts: Optional[bool] = None, name: Optional[str] = None):
    """Decorator (with or without arguments): calls of the decorated function run one traced
    function body, re-traced only for new input shapes/dtypes; gradients flow through it."""

    def decorated(inner: Callable) -> Callable:
        traced = tf.function(inner, autograph=False)

        @functools.wraps(inner)
        def call(*args):
            with tf.name_scope(name or "outlined_function"):
                return traced(*args)

        return call

    return decorated if func is None else decorated(func)
