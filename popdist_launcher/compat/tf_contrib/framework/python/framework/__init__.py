"""``tensorflow.contrib.framework.python.framework``: ``checkpoint_utils``."""
