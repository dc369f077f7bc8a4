"""``ipu.optimizers.cross_replica_optimizer``: CrossReplicaOptimizer, gradients averaged over
every replica of every instance."""
from __future__ import annotations

import tensorflow as tf

from popdist_launcher.ipu.optimizers.ipu_optimizer import IpuOptimizer


class CrossReplicaOptimizer(IpuOptimizer):
    """Wraps a ``tf.compat.v1.train.Optimizer`` so gradients are averaged over every replica of
    every instance before they are applied.

    Under one of this package's strategies (an IPUEstimator always runs under one) the wrapped
    optimizer already sums per-replica gradients of the loss divided by the replica count, which
    is that average, so the wrapper only delegates. In a replicated ``ipu_compiler.compile``
    program (see ``ipu._replicated_compile``) ``apply_gradients`` averages each gradient over
    the program's replicas (``cross_replica_mean``, as Graphcore's), so every replica applies
    the same update to its copy of the variables. Outside both, in a program started by
    poprun-lite, it averages with Horovod's allreduce across instances.
    """

    def __init__(self, opt: tf.compat.v1.train.Optimizer, name: str = "CrossReplicaOptimizer"):
        super().__init__(opt, name=name)

    def compute_gradients(self, loss, var_list=None, **kwargs):
        grads_and_vars = self._opt.compute_gradients(loss, var_list=var_list, **kwargs)
        if tf.distribute.has_strategy():
            return grads_and_vars
        from popdist_launcher import collectives
        if not collectives.is_initialized():
            collectives.init()
        if collectives.size() == 1:
            return grads_and_vars
        return [(None if g is None else collectives.allreduce(g, op=collectives.Average), v)
                for g, v in grads_and_vars]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        from popdist_launcher.ipu._loop_support import REPLICA
        from popdist_launcher.ipu.ops import cross_replica_ops

        program_replica = REPLICA.get()
        if program_replica is not None and program_replica.count > 1:
            grads_and_vars = [(None if g is None else cross_replica_ops.cross_replica_mean(g), v)
                              for g, v in grads_and_vars]
        return super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
