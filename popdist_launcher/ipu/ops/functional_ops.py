"""``ipu.outlined_function``: a Python function traced once into a reusable ``tf.function`` (no
AutoGraph, as in Graphcore's), built in place in TF1 graphs; the IPU compiler hints do nothing."""
from __future__ import annotations

import functools
from typing import Callable, Optional

import tensorflow as tf


def outlined_function(func: Optional[Callable] = None, unique_sharding: bool = False,
                      keep_input_layouts: Optional[bool] = None, name: Optional[str] = None):
    """Decorator (with or without arguments): under TF2, calls of the decorated function run one
    traced function body (re-traced only for new input shapes/dtypes); in a TF1 graph each call
    builds the body in place. Gradients flow through it either way."""

    def decorated(inner: Callable) -> Callable:
        traced = tf.function(inner, autograph=False)

        @functools.wraps(inner)
        def call(*args):
            with tf.name_scope(name or "outlined_function"):
                if not tf.compat.v1.executing_eagerly_outside_functions():
                    # A TF1 graph: build the body in place, so variables it creates (a
                    # layer_norm's gamma and beta) are ordinary graph variables, even in a loop.
                    return inner(*args)
                return traced(*args)

        return call

    return decorated if func is None else decorated(func)
