"""``tensorflow.contrib.layers``' weight initializers (TensorFlow 1.15's ``initializers.py``):
``variance_scaling_initializer`` and Xavier (Glorot) on top of it. Its other layers are
``tf.compat.v1.layers`` / ``tf.keras.layers`` now."""
import math

import tensorflow as tf


def _fans(shape):
    """contrib's fans: the last two dimensions times the receptive field (1 for a scalar)."""
    shape = [int(d) for d in shape]
    if not shape:
        return 1.0, 1.0
    fan_in = float(shape[-2]) if len(shape) > 1 else float(shape[-1])
    fan_out = float(shape[-1])
    for dim in shape[:-2]:
        fan_in *= dim
        fan_out *= dim
    return fan_in, fan_out


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None,
                                 dtype=tf.float32):
    """Values of variance ``factor / n`` (n: fan_in, fan_out or their mean, by ``mode``): uniform
    in [-sqrt(3 factor / n), sqrt(3 factor / n)], or a normal truncated at two standard deviations
    with stddev sqrt(1.3 factor / n), as TensorFlow 1.15's contrib drew them."""
    if not dtype.is_floating:
        raise TypeError("variance_scaling_initializer: dtype must be a floating point type, "
                        f"got {dtype!r}.")
    if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
        raise TypeError(f"variance_scaling_initializer: mode must be FAN_IN, FAN_OUT or FAN_AVG, "
                        f"got {mode!r}.")

    def initializer(shape, dtype=dtype, partition_info=None):
        if not dtype.is_floating:
            raise TypeError("Cannot create initializer for non-floating point type.")
        fan_in, fan_out = _fans(shape)
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[mode]
        if uniform:
            limit = math.sqrt(3.0 * factor / n)
            return tf.random.uniform(shape, -limit, limit, dtype, seed=seed)
        return tf.random.truncated_normal(shape, 0.0, math.sqrt(1.3 * factor / n), dtype,
                                          seed=seed)

    return initializer


def xavier_initializer(uniform=True, seed=None, dtype=tf.float32):
    """Glorot and Bengio's initializer: variance 1 / mean(fan_in, fan_out)."""
    return variance_scaling_initializer(factor=1.0, mode="FAN_AVG", uniform=uniform, seed=seed,
                                        dtype=dtype)


xavier_initializer_conv2d = xavier_initializer
