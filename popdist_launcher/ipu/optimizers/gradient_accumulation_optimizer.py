"""``ipu.optimizers.gradient_accumulation_optimizer``: Graphcore's module path for the gradient
accumulation optimizers (defined in ``ipu.optimizers``)."""
from popdist_launcher.ipu.optimizers import (  # noqa: F401
    CrossReplicaGradientAccumulationOptimizer, CrossReplicaGradientAccumulationOptimizerV2,
    GradientAccumulationOptimizer, GradientAccumulationOptimizerV2,
    GradientAccumulationReductionMethod)
