"""``ipu.optimizers``: the IPU optimizer wrappers for ``tf.compat.v1.train`` optimizers.

CrossReplicaOptimizer averages gradients over all global replicas; GradientAccumulationOptimizerV2
accumulates the gradients of ``num_mini_batches`` calls of ``apply_gradients`` (one per loop
iteration, as in Graphcore's ``loops.repeat`` training loops) and applies them once, summed or
averaged; MapGradientOptimizer maps each gradient before it is applied.
"""
from __future__ import annotations

# Graphcore's package imports its classes from these modules, so after `from tensorflow.python
# import ipu` each module is an attribute (ipu.optimizers.cross_replica_optimizer) too.
from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod  # noqa: F401
from popdist_launcher.ipu.optimizers import (  # noqa: F401
    cross_replica_optimizer, gradient_accumulation_optimizer, ipu_optimizer,
    map_gradient_optimizer, sharded_optimizer)
from popdist_launcher.ipu.optimizers.cross_replica_optimizer import CrossReplicaOptimizer  # noqa: F401
from popdist_launcher.ipu.optimizers.gradient_accumulation_optimizer import (  # noqa: F401
    CrossReplicaGradientAccumulationOptimizer, CrossReplicaGradientAccumulationOptimizerV2,
    GradientAccumulationOptimizer, GradientAccumulationOptimizerV2)
from popdist_launcher.ipu.optimizers.ipu_optimizer import IpuOptimizer  # noqa: F401
from popdist_launcher.ipu.optimizers.map_gradient_optimizer import MapGradientOptimizer  # noqa: F401
from popdist_launcher.ipu.optimizers.sharded_optimizer import ShardedOptimizer  # noqa: F401
