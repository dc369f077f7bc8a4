"""``tensorflow.contrib.data``: ``AUTOTUNE`` (``tf.data.AUTOTUNE``)."""
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
