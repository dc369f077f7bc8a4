"""``tensorflow.contrib.compiler``: ``xla``."""
