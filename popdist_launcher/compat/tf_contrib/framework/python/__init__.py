"""``tensorflow.contrib.framework.python``."""
