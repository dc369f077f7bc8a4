"""``tensorflow.compiler.plugin.poplar``: the packages ``ops`` and ``driver``."""
