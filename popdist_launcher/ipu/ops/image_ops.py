"""``ipu.image_ops``: Graphcore's ``normalise_image`` (normalise three channels, pad to four)."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def normalise_image(image, channel_offsets, channel_scales, scale=1, name: Optional[str] = None):
    """``(image[..., c] * scale - channel_offsets[c]) * channel_scales[c]`` for the 3 channels,
    then a fourth channel of zeros; float16 for uint8 images, else the image's type."""
    image = tf.convert_to_tensor(image)
    if image.dtype not in (tf.float16, tf.float32, tf.uint8):
        raise TypeError("The input `image` to `normalise_image` must be either float16, float32 "
                        "or uint8.")
    channels = image.shape[-1] if image.shape.rank else None
    if channels is not None and channels != 3:
        raise ValueError(f"The image has {channels} channels, expected 3.")
    out_type = tf.float16 if image.dtype == tf.uint8 else image.dtype
    with tf.name_scope(name or "normalise_image"):
        offsets = tf.cast(tf.convert_to_tensor(channel_offsets), out_type)
        scales = tf.cast(tf.convert_to_tensor(channel_scales), out_type)
        normalised = (tf.cast(image, out_type) * tf.cast(scale, out_type) - offsets) * scales
        padding = [[0, 0]] * (image.shape.rank - 1) + [[0, 1]]
        return tf.pad(normalised, padding)
