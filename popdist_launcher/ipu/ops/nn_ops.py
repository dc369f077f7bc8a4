"""``ipu.nn_ops``: Graphcore's neural-network ops with their standard definitions."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def gelu(x, approximate: bool = True, name: Optional[str] = None):
    """Gaussian error linear unit; ``approximate`` selects the tanh approximation, as on IPUs."""
    with tf.name_scope(name or "gelu"):
        return tf.nn.gelu(x, approximate=approximate)


def hard_sigmoid(x, name: Optional[str] = None):
    """``max(0, min(1, 0.2 * x + 0.5))``."""
    with tf.name_scope(name or "hard_sigmoid"):
        return tf.clip_by_value(0.2 * x + 0.5, 0.0, 1.0)


def swish(x, name: Optional[str] = None):
    """``x * sigmoid(x)``."""
    with tf.name_scope(name or "swish"):
        return tf.nn.silu(x)


def softmax(x, stable: bool = False, name: Optional[str] = None):
    """Softmax over the last axis (TensorFlow's is always the numerically stable one)."""
    with tf.name_scope(name or "softmax"):
        return tf.nn.softmax(x, axis=-1)
