"""``ipu.optimizers.gradient_accumulation_optimizer``: the gradient accumulation optimizers."""
from __future__ import annotations

import tensorflow as tf

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu.optimizers.cross_replica_optimizer import CrossReplicaOptimizer
from popdist_launcher.ipu.optimizers.ipu_optimizer import IpuOptimizer


def _accumulator_dtype(dtype, variable):
    if dtype is None:
        return variable.dtype.base_dtype
    return (dtype(variable) if callable(dtype) and not isinstance(dtype, tf.DType)
            else tf.as_dtype(dtype))


class GradientAccumulationOptimizerV2(IpuOptimizer):
    """Accumulates the gradients passed to ``apply_gradients`` over ``num_mini_batches`` calls,
    then has the wrapped optimizer apply them once (SUM: their sum; MEAN: divided by
    ``num_mini_batches``; RUNNING_MEAN: a running mean) and increments ``global_step`` once.

    Accumulators live in host variables created with the graph's other variables (run
    ``global_variables_initializer`` after building the loop, as usual). Offloading and sharding
    options place IPU memory and have no effect here.
    """

    def __init__(self, opt, num_mini_batches: int, offload_weight_update_variables=None,
                 replicated_optimizer_state_sharding: bool = False, dtype=None,
                 reduction_method=GradientAccumulationReductionMethod.SUM,
                 name: str = "GradientAccumulationOptimizerV2") -> None:
        super().__init__(opt, name=name)
        if (isinstance(num_mini_batches, bool) or not isinstance(num_mini_batches, int)
                or num_mini_batches < 1):
            raise ValueError(
                f"num_mini_batches must be a positive number, got {num_mini_batches!r}.")
        self._num_mini_batches = num_mini_batches
        self._dtype = dtype
        self._reduction_method = GradientAccumulationReductionMethod.parse(reduction_method)
        self._state = None  # (variables, counter, accumulators), kept across tf.function traces

    def _accumulators(self, variables):
        if self._state is None or self._state[0] != [v.ref() for v in variables]:
            with tf.init_scope():
                counter = tf.Variable(lambda: tf.constant(0, tf.int32), trainable=False,
                                      name=f"{self.get_name()}_count")
                accumulators = [
                    tf.Variable(lambda v=v: tf.zeros(v.shape, _accumulator_dtype(self._dtype, v)),
                                trainable=False, name=f"{self.get_name()}_accumulator_{i}")
                    for i, v in enumerate(variables)]
            self._state = ([v.ref() for v in variables], counter, accumulators)
        return self._state[1], self._state[2]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        n = self._num_mini_batches
        counter, accumulators = self._accumulators([v for _, v in pairs])
        k = tf.cast(counter, tf.float32)
        updates = []
        for acc, (g, _) in zip(accumulators, pairs):
            g = tf.cast(tf.convert_to_tensor(g), acc.dtype)
            if self._reduction_method == GradientAccumulationReductionMethod.RUNNING_MEAN:
                updates.append(acc.assign(acc * tf.cast(k / (k + 1), acc.dtype)
                                          + g / tf.cast(k + 1, acc.dtype)))
            else:
                updates.append(acc.assign_add(g))
        with tf.control_dependencies(updates):
            count = counter.assign_add(1)

        def update():
            scale = (1.0 / n if self._reduction_method == GradientAccumulationReductionMethod.MEAN
                     else 1.0)
            grads = [tf.identity(a) * tf.cast(scale, a.dtype) for a in accumulators]
            applied = self._opt.apply_gradients(list(zip(grads, [v for _, v in pairs])),
                                                global_step=global_step, name=name)
            with tf.control_dependencies([applied]):
                resets = [a.assign(tf.zeros_like(a)) for a in accumulators] + [counter.assign(0)]
            with tf.control_dependencies(resets):  # the output carries every effect
                return tf.constant(True)

        done = tf.cond(tf.equal(count, n), update, lambda: tf.constant(False))
        return tf.group(done, name=name)


class CrossReplicaGradientAccumulationOptimizerV2(GradientAccumulationOptimizerV2):
    """GradientAccumulationOptimizerV2 whose gradients are also averaged over all global
    replicas (the wrapped optimizer is put in a CrossReplicaOptimizer)."""

    def __init__(self, opt, num_mini_batches: int, offload_weight_update_variables=None,
                 replicated_optimizer_state_sharding: bool = False, dtype=None,
                 reduction_method=GradientAccumulationReductionMethod.SUM,
                 name: str = "CrossReplicaGradientAccumulationOptimizerV2") -> None:
        super().__init__(CrossReplicaOptimizer(opt), num_mini_batches,
                         offload_weight_update_variables, replicated_optimizer_state_sharding,
                         dtype, reduction_method, name)


class GradientAccumulationOptimizer(GradientAccumulationOptimizerV2):
    """Graphcore's first accumulation optimizer: the sum of ``num_mini_batches`` gradients applied
    once (GradientAccumulationOptimizerV2 with SUM)."""

    def __init__(self, opt, num_mini_batches: int, verify_usage: bool = True,
                 name: str = "GradientAccumulationOptimizer") -> None:
        super().__init__(opt, num_mini_batches, name=name)


class CrossReplicaGradientAccumulationOptimizer(CrossReplicaGradientAccumulationOptimizerV2):
    """GradientAccumulationOptimizer whose gradients are also averaged over all global replicas."""

    def __init__(self, opt, num_mini_batches: int, verify_usage: bool = True,
                 name: str = "CrossReplicaGradientAccumulationOptimizer") -> None:
        super().__init__(opt, num_mini_batches, name=name)
