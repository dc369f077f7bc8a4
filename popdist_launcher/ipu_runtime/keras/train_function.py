"""The train function of a Keras model that accumulates gradients over micro-batches, spans
several devices per replica, or runs emulated replicas one after another.

Each optimizer update uses N micro-batches (forward and backward pass each), their gradients
summed (SUM, the default) or averaged (MEAN, RUNNING_MEAN), as Graphcore's gradient
accumulation does; the gradients of several replicas are summed.
"""
from __future__ import annotations

import logging

import tensorflow as tf

from popdist_launcher.compat import keras2
from popdist_launcher.ipu_runtime.reduction_methods import GradientAccumulationReductionMethod
from popdist_launcher.ipu_runtime.keras.options import is_pipelined, log_once, options
from popdist_launcher.ipu_runtime.keras.replicas import (emulated_replicas, is_stage_device,
                                                         replica_span)

log = logging.getLogger(__name__)
keras_data_adapter = keras2.import_src("engine.data_adapter")
training = keras2.import_src("engine.training")


def make_accumulating_train_function(model, n: int):
    """``model``'s train function: ``n`` micro-batches per optimizer update, each replica's
    gradients accumulated on its first device, summed over the replicas."""
    strategy = model.distribute_strategy
    method = options(model)["ga_method"]
    variables = model.trainable_variables
    with strategy.scope():  # kept by the closures below, not by the model (so never saved)
        accumulators = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                    synchronization=tf.VariableSynchronization.ON_READ,
                                    aggregation=tf.VariableAggregation.SUM,
                                    name=f"accumulated_{v.name.split(':')[0].replace('/', '_')}")
                        for v in variables]
    optimizer = model.optimizer
    span = replica_span(model)
    emulated = emulated_replicas(model)
    if is_pipelined(model):
        log_once(log, "pipeline", "pipelined Keras model: the stages run in order on the "
                 "replica's device, %d micro-batches per update", n)

    def replica_gradients(data):
        """The (loss-scaled) gradients of one replica's batch; its metrics updated."""
        x, y, sample_weight = keras_data_adapter.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight)
            scaled = (optimizer.get_scaled_loss(loss) if hasattr(optimizer, "get_scaled_loss")
                      else loss)
        grads = tape.gradient(scaled, variables)
        with tf.control_dependencies([g for g in grads if g is not None]):
            return grads, model.compute_metrics(x, y, y_pred, sample_weight)

    def unscaled(grads, first: bool = True):
        """Gradients without loss scaling. An ALSOptimizer records the statistics of the first
        replica only (each replica has its own; read from outside, the first's)."""
        if hasattr(optimizer, "get_unscaled_gradients"):
            return optimizer.get_unscaled_gradients(grads)
        if hasattr(optimizer, "_accumulation_micro_batch"):  # keras.ipu.optimizers.ALSOptimizer
            if first:
                return optimizer._accumulation_micro_batch(grads)  # noqa: SLF001
            return optimizer._unscaled(grads)  # noqa: SLF001
        return grads

    def micro_step(data, index):
        if not is_stage_device(span):  # a replica's other devices: nothing to add
            return model.get_metrics_result()
        if emulated == 1:
            grads, metrics = replica_gradients(data)
            grads = unscaled(grads)
        else:  # the replicas' batches, one after another; their gradients summed
            def part(r):
                def rows(t):
                    size = tf.shape(t)[0] // emulated
                    return t[r * size:(r + 1) * size]
                return tf.nest.map_structure(rows, data)

            per_replica = []
            for r in range(emulated):
                replica_grads, metrics = replica_gradients(part(r))
                per_replica.append(replica_grads)
            # Unscaled with the loss scale all replicas used, before the first updates it.
            summed = [unscaled(g, first=False) for g in per_replica[1:]]
            grads = unscaled(per_replica[0])
            for more in summed:
                grads = [None if g is None else g + m for g, m in zip(grads, more)]
        updates = []
        for acc, grad in zip(accumulators, grads):
            if grad is None:
                continue
            grad = tf.convert_to_tensor(grad)
            if method == GradientAccumulationReductionMethod.RUNNING_MEAN:
                k = tf.cast(index, grad.dtype)
                updates.append(acc.assign(acc * (k / (k + 1)) + grad / (k + 1), read_value=False))
            else:
                updates.append(acc.assign_add(grad, read_value=False))
        with tf.control_dependencies(updates):
            return tf.nest.map_structure(tf.identity, metrics)

    def apply_step():
        scale = 1.0 / n if method == GradientAccumulationReductionMethod.MEAN else 1.0
        grads = [tf.identity(acc) * tf.cast(scale, acc.dtype) for acc in accumulators]
        getattr(optimizer, "_accumulation_apply", optimizer.apply_gradients)(
            list(zip(grads, variables)))
        for acc in accumulators:  # tf.function orders these after the reads above
            acc.assign(tf.zeros_like(acc), read_value=False)

    def micro(iterator, index):
        outputs = strategy.run(micro_step, args=(next(iterator), index))
        model._train_counter.assign_add(1)  # noqa: SLF001
        # Every device returns the metrics' results, already reduced over the replicas: the
        # first device's are the values (a sum showed N times the loss in the progress bar).
        return training.reduce_per_replica(outputs, strategy, reduction="first")

    def train_function(iterator):
        steps = model._steps_per_execution  # noqa: SLF001 (Keras lowers it for a short last run)
        updates = 1 if steps is None else tf.cast(steps, tf.int32) // n
        outputs = micro(iterator, tf.constant(0))
        for index in tf.range(1, n):
            outputs = micro(iterator, index)
        strategy.run(apply_step)
        for _ in tf.range(updates - 1):
            for index in tf.range(n):
                outputs = micro(iterator, index)
            strategy.run(apply_step)
        return outputs

    if model.run_eagerly:
        return train_function
    return tf.function(train_function, reduce_retracing=True)
