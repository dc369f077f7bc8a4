"""``keras.ipu.optimizers.GradientAccumulationOptimizer``: a Keras optimizer that adds up the
gradients of ``num_mini_batches`` calls of ``apply_gradients`` and updates the weights once."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import tensorflow as tf

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu.keras.optimizers.optimizer_v2_wrapper import OptimizerV2Wrapper


def _accumulator_dtype(dtype, variable) -> tf.DType:
    if dtype is None:
        return variable.dtype.base_dtype
    if callable(dtype) and not isinstance(dtype, tf.DType):
        return tf.as_dtype(dtype(variable))
    return tf.as_dtype(dtype)


def _check_single_device(name: str) -> None:
    """ValueError inside a strategy with several local replica devices: the update every N
    calls is a conditional cross-replica step, which TensorFlow's replicas cannot take."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return
    devices = len(tf.distribute.get_strategy().extended.worker_devices)
    if devices > 1:
        raise ValueError(
            f"{name} cannot run inside a strategy with {devices} local replica devices here (its "
            f"update every num_mini_batches calls would be a conditional cross-replica step). "
            f"For a Keras model use model.set_gradient_accumulation_options("
            f"gradient_accumulation_steps_per_replica=N) with the unwrapped optimizer, which "
            f"gives the same numbers.")


class GradientAccumulationOptimizer(OptimizerV2Wrapper):
    """Wraps a Keras optimizer: each call of ``apply_gradients`` adds the gradients to
    accumulators, and every ``num_mini_batches``-th call has the wrapped optimizer apply them
    once (SUM: their sum, the default; MEAN: divided by ``num_mini_batches``; RUNNING_MEAN: a
    running mean), then clears them. ``iterations`` counts the calls (mini-batches); the
    wrapped optimizer's counts the updates. ``num_mini_batches=1`` gives back ``opt`` itself.

    Inside a strategy with several local replica devices it raises a ValueError naming
    ``model.set_gradient_accumulation_options`` (the same numbers for Keras models).
    ``offload_weight_update_variables`` and ``replicated_optimizer_state_sharding`` place IPU
    memory and have no effect here.
    """

    def __new__(cls, opt, num_mini_batches, *args, **kwargs):
        if num_mini_batches == 1:
            return opt
        return super().__new__(cls)

    def __init__(self, opt, num_mini_batches: int, offload_weight_update_variables=None,
                 replicated_optimizer_state_sharding: bool = False, dtype=None,
                 reduction_method=GradientAccumulationReductionMethod.SUM,
                 name: str = "GradientAccumulationOptimizer") -> None:
        if isinstance(num_mini_batches, bool) or not isinstance(num_mini_batches, int) or \
                num_mini_batches < 1:
            raise ValueError(f"num_mini_batches must be an int >= 1, got {num_mini_batches!r}.")
        super().__init__(opt, name=name)
        self._num_mini_batches = num_mini_batches
        self._offload_weight_update_variables = offload_weight_update_variables
        self._replicated_optimizer_state_sharding = replicated_optimizer_state_sharding
        self._dtype = dtype
        self._reduction_method = GradientAccumulationReductionMethod.parse(reduction_method)
        self._accumulated = None  # (variable refs, counter, accumulators)

    @property
    def num_mini_batches(self) -> int:
        return self._num_mini_batches

    def _state(self, variables: List[tf.Variable]):
        refs = [v.ref() for v in variables]
        if self._accumulated is None or self._accumulated[0] != refs:
            on_read = dict(synchronization=tf.VariableSynchronization.ON_READ, trainable=False)
            with tf.init_scope():
                counter = tf.Variable(0, dtype=tf.int32, name=f"{self._name}_counter",
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                                      **on_read)
                accumulators = [
                    tf.Variable(tf.zeros(v.shape, _accumulator_dtype(self._dtype, v)),
                                name=f"{self._name}_accumulator_{i}",
                                aggregation=tf.VariableAggregation.SUM, **on_read)
                    for i, v in enumerate(variables)]
            self._accumulated = (refs, counter, accumulators)
        return self._accumulated[1], self._accumulated[2]

    def apply_gradients(self, grads_and_vars, name: Optional[str] = None,
                        experimental_aggregate_gradients: bool = True):
        """Accumulate the gradients; apply them with the wrapped optimizer on every
        ``num_mini_batches``-th call. Returns whether this call updated the weights."""
        _check_single_device(type(self).__name__)
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        variables = [v for _, v in pairs]
        counter, accumulators = self._state(variables)
        method, n = self._reduction_method, self._num_mini_batches
        k = tf.cast(counter.read_value(), tf.float32)
        for acc, (grad, _) in zip(accumulators, pairs):
            grad = tf.cast(tf.convert_to_tensor(grad), acc.dtype)
            if method == GradientAccumulationReductionMethod.RUNNING_MEAN:
                kk = tf.cast(k, acc.dtype)
                acc.assign(acc * (kk / (kk + 1)) + grad / (kk + 1), read_value=False)
            else:
                acc.assign_add(grad, read_value=False)
        count = counter.assign_add(1)
        self.iterations.assign_add(1, read_value=False)

        def update():
            scale = 1.0 / n if method == GradientAccumulationReductionMethod.MEAN else 1.0
            grads = [acc.read_value() * tf.cast(scale, acc.dtype) for acc in accumulators]
            with tf.control_dependencies([self._inner_apply(zip(grads, variables), name)]):
                resets = [acc.assign(tf.zeros_like(acc)) for acc in accumulators]
                resets.append(counter.assign(0))
            with tf.control_dependencies(resets):
                return tf.constant(True)

        return tf.cond(tf.equal(count, n), update, lambda: tf.constant(False))

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(num_mini_batches=self._num_mini_batches,
                      offload_weight_update_variables=self._offload_weight_update_variables,
                      replicated_optimizer_state_sharding=self._replicated_optimizer_state_sharding,
                      dtype=self._dtype, reduction_method=self._reduction_method)
        return config
