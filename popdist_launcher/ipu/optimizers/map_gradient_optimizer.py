"""``ipu.optimizers.map_gradient_optimizer``: Graphcore's module path for MapGradientOptimizer
(defined in ``ipu.optimizers``)."""
from popdist_launcher.ipu.optimizers import MapGradientOptimizer  # noqa: F401
