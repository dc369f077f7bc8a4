"""``ipu.optimizers.sharded_optimizer``: Graphcore's module path for ShardedOptimizer
(defined in ``ipu.optimizers``)."""
from popdist_launcher.ipu.optimizers import ShardedOptimizer  # noqa: F401
