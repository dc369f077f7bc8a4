"""Graphcore's ``popdist`` under the name older code imports (``from popdist_launcher import
popdist``): the top-level ``popdist`` package itself, with ``popdist.tensorflow`` loaded, so
``popdist.tensorflow.set_ipu_config(config)`` works as after ``import popdist.tensorflow``."""
import sys

import popdist
import popdist.tensorflow  # noqa: F401 (the attribute programs call through)

sys.modules[__name__] = popdist  # one module under both names: every name, the same objects
