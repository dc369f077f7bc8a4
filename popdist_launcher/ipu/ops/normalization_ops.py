"""``ipu.normalization_ops``: group, layer and instance normalization with Graphcore's arguments:
statistics per example and group, ``beta``/``gamma`` variables of shape ``[channels]``."""
from __future__ import annotations

import logging
from typing import Optional

import tensorflow as tf

log = logging.getLogger(__name__)

DATA_FORMAT_NCHW = "NCHW"
DATA_FORMAT_NHWC = "NHWC"
_MIN_EPSILON = 1.53e-5


def _collections(variables_collections, name: str):
    if isinstance(variables_collections, dict):
        return variables_collections.get(name)
    return variables_collections


def _parameter(name: str, channels: int, dtype, enabled: bool, default: float, initializers,
               variables_collections, trainable: bool):
    if not enabled:
        return tf.constant(default, dtype=dtype, shape=[channels])
    fallback = tf.compat.v1.ones_initializer() if default else tf.compat.v1.zeros_initializer()
    initializer = (initializers or {}).get(name, fallback)
    return tf.compat.v1.get_variable(name, shape=[channels], dtype=dtype, initializer=initializer,
                                     collections=_collections(variables_collections, name),
                                     trainable=trainable)


def _group_norm(inputs, groups: int, channels_axis: int, center: bool, scale: bool,
                epsilon: float, param_initializers, reuse, variables_collections, trainable: bool,
                scope, default_scope: str, strided: bool):
    inputs = tf.convert_to_tensor(inputs)
    rank = inputs.shape.rank
    if rank is None:
        raise ValueError(f"Inputs {inputs.name} has undefined rank.")
    if channels_axis > rank - 1:
        raise ValueError("Axis is out of bounds.")
    if channels_axis < 0:
        channels_axis += rank
    if channels_axis not in (1, rank - 1):
        raise ValueError("Unsupported data format, group norm only supports NCHW (channel axis 1) "
                         "and NHWC (channel axis -1).")
    channels = inputs.shape[channels_axis]
    if channels is None:
        raise ValueError(f"Inputs {inputs.name} has undefined channel dimension: {channels_axis}.")
    if groups > channels:
        raise ValueError(f"Invalid groups {groups} for {channels} channels.")
    if channels % groups:
        raise ValueError(f"{channels} channels is not commensurate with {groups} groups.")
    with tf.compat.v1.variable_scope(scope, default_scope, [inputs], reuse=reuse):
        dtype = inputs.dtype.base_dtype
        beta = _parameter("beta", channels, dtype, center, 0.0, param_initializers,
                          variables_collections, trainable)
        gamma = _parameter("gamma", channels, dtype, scale, 1.0, param_initializers,
                           variables_collections, trainable)
        # Channels last, then split them into [groups, group_size] (strided grouping: channel c
        # is in group c % groups, as PopLibs groups them) or [group_size ...] contiguous.
        x = tf.experimental.numpy.moveaxis(inputs, channels_axis, -1)
        shape = tf.shape(x)
        size = channels // groups
        split, axes = ([size, groups], [1, 2]) if strided else ([groups, size], [1, 3])
        grouped = tf.reshape(x, tf.concat([shape[:1], [-1], split], 0))
        mean, variance = tf.nn.moments(tf.cast(grouped, tf.float32), axes=axes, keepdims=True)
        normalized = (tf.cast(grouped, tf.float32) - mean) * tf.math.rsqrt(variance + epsilon)
        normalized = tf.cast(tf.reshape(normalized, shape), dtype)
        outputs = normalized * gamma + beta
        return tf.experimental.numpy.moveaxis(outputs, -1, channels_axis)


def _warn_epsilon(op: str, epsilon: float) -> None:
    if epsilon < _MIN_EPSILON:
        log.warning("The epsilon value of %s is below 1.53e-5, which on IPUs can lead to NaN "
                    "values; increase it to keep programs portable.", op)


def group_norm(inputs, groups: int = 2, channels_axis: int = -1, center: bool = True,
               scale: bool = True, epsilon: float = 1.53e-5, param_initializers=None, reuse=None,
               variables_collections=None, training: bool = True, trainable: bool = True,
               scope: Optional[str] = None, strided_channel_grouping: bool = True):
    """Group normalization (Wu & He): each example's channels split into ``groups`` (channel c
    in group ``c % groups`` with ``strided_channel_grouping``, else contiguous blocks), normalized
    over the group and the spatial axes, then ``* gamma + beta`` per channel. ``training`` makes no
    difference: the statistics are always the example's own."""
    _warn_epsilon("group_norm", epsilon)
    return _group_norm(inputs, groups, channels_axis, center, scale, epsilon, param_initializers,
                       reuse, variables_collections, trainable, scope, "GroupNorm",
                       strided_channel_grouping)


def layer_norm(inputs, channels_axis: int = -1, center: bool = True, scale: bool = True,
               epsilon: float = 1.53e-5, param_initializers=None, reuse=None,
               variables_collections=None, training: bool = True, trainable: bool = True,
               scope: Optional[str] = None):
    """Layer normalization: a group normalization with one group (statistics over all the
    example's values), ``beta``/``gamma`` per channel."""
    _warn_epsilon("layer_norm", epsilon)
    return _group_norm(inputs, 1, channels_axis, center, scale, epsilon, param_initializers, reuse,
                       variables_collections, trainable, scope, "LayerNorm", False)


def instance_norm(inputs, channels_axis: int = -1, center: bool = True, scale: bool = True,
                  epsilon: float = 1.53e-5, param_initializers=None, reuse=None,
                  variables_collections=None, training: bool = True, trainable: bool = True,
                  scope: Optional[str] = None):
    """Instance normalization: a group normalization with one group per channel (statistics over
    the spatial axes of each example's channel)."""
    _warn_epsilon("instance_norm", epsilon)
    inputs = tf.convert_to_tensor(inputs)
    if inputs.shape.rank is None:
        raise ValueError(f"Inputs {inputs.name} has undefined rank.")
    groups = inputs.shape[channels_axis]
    return _group_norm(inputs, groups, channels_axis, center, scale, epsilon, param_initializers,
                       reuse, variables_collections, trainable, scope, "InstanceNorm", False)
