"""``ipu.statistics_ops``: histograms over fixed levels: n levels make n + 1 bins, bin i counting
``levels[i-1] <= x < levels[i]`` (bin 0 everything below ``levels[0]``, bin n the rest)."""
from __future__ import annotations

import tensorflow as tf


def _check(what: str, tensors, floats=(tf.float16, tf.float32)):
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if any(t.dtype not in floats for t in tensors):
        raise ValueError(f"Only float16 and float32 types are supported for {what}.")
    if any(t.shape.rank != 1 for t in tensors):
        raise ValueError(f"{what} expects rank-1 tensor inputs.")
    return tensors


def fixed_width_bins(inputs, n_bins: int) -> tf.Tensor:
    """``n_bins`` evenly spaced levels from the minimum to the maximum of ``inputs``."""
    inputs = tf.convert_to_tensor(inputs)
    return tf.linspace(tf.reduce_min(inputs), tf.reduce_max(inputs), n_bins)


def histogram_normalize(hist) -> tf.Tensor:
    """``hist`` divided by its sum."""
    return hist / tf.reduce_sum(hist, axis=0)


def _counts(inputs, levels, absolute_of_input: bool) -> tf.Tensor:
    values = tf.abs(inputs) if absolute_of_input else inputs
    bins = tf.searchsorted(tf.cast(levels, tf.float32), tf.cast(values, tf.float32), side="right")
    n = tf.shape(levels)[0] + 1
    return tf.math.bincount(bins, minlength=n, maxlength=n, dtype=tf.float32)


def histogram(inputs, levels, absolute_of_input: bool = False) -> tf.Tensor:
    """Float32 counts of ``inputs`` (their magnitudes with ``absolute_of_input``) per bin."""
    inputs, levels = _check("histogram computation", [inputs, levels])
    return _counts(inputs, levels, absolute_of_input)


def histogram_update(hist, inputs, levels, absolute_of_input: bool = False) -> tf.Tensor:
    """``hist`` (float32, len(levels) + 1 bins) plus the histogram of ``inputs``."""
    hist = tf.convert_to_tensor(hist)
    if hist.dtype != tf.float32:
        raise ValueError("hist must be of float32 type")
    hist, inputs, levels = _check("histogram update", [hist, inputs, levels])
    if hist.shape[0] != levels.shape[0] + 1:
        raise ValueError("hist and levels shapes are incompatible. For n levels, hist must have "
                         "n+1 elements.")
    return hist + _counts(inputs, levels, absolute_of_input)
