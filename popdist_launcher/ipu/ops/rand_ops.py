"""``ipu.rand_ops``: Graphcore's dropout, kept values scaled by ``1 / (1 - rate)``; with a ``seed``
(two int32) the mask is a stateless Philox function of it, the same compiled with XLA or not."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def dropout(x, rate: float = 0.5, noise_shape=None, seed=None, name: Optional[str] = None,
            **kwargs):
    """Zero each element of ``x`` with probability ``rate`` (elements sharing a ``noise_shape``
    entry of 1 share the decision) and scale the rest by ``1 / (1 - rate)``."""
    if rate >= 1.0 or rate < 0.0:
        raise ValueError(f"The rate must be in the range [0, 1), but was {rate}")
    x = tf.convert_to_tensor(x)
    if noise_shape:
        shape = x.shape.as_list()
        if len(shape) != len(noise_shape):
            raise ValueError("The length of noise_shape must equal the rank of x.")
        for i, j in zip(shape, noise_shape):
            if j != 1 and i != j:
                raise ValueError(f"Dimension mismatch, {i} != {j}.")
    with tf.name_scope(name or "dropout"):
        if seed is None:
            return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape)
        seed = tf.convert_to_tensor(seed)
        if seed.shape != [2]:
            raise ValueError(f"Expected the seed to have a shape [2], but got {seed.shape}.")
        shape = noise_shape if noise_shape else tf.shape(x)
        keep = tf.random.stateless_uniform(shape, tf.cast(seed, tf.int32), alg="philox") >= rate
        return x * tf.cast(keep, x.dtype) * tf.cast(1.0 / (1.0 - rate), x.dtype)
