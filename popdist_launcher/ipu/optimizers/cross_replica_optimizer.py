"""``ipu.optimizers.cross_replica_optimizer``: Graphcore's module path for CrossReplicaOptimizer
(defined in ``ipu.optimizers``)."""
from popdist_launcher.ipu.optimizers import CrossReplicaOptimizer  # noqa: F401
