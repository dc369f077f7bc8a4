"""``ipu.gradient_accumulation``: how accumulated gradients are reduced before the update
(Graphcore's name; the enum lives in popdist_launcher.ipu_runtime.reduction_methods)."""
from popdist_launcher.ipu_runtime.reduction_methods import (  # noqa: F401
    GradientAccumulationReductionMethod, parse_member)
