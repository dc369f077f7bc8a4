"""``ipu.optimizers.ipu_optimizer``: Graphcore's module path for IpuOptimizer
(defined in ``ipu.optimizers``)."""
from popdist_launcher.ipu.optimizers import IpuOptimizer  # noqa: F401
