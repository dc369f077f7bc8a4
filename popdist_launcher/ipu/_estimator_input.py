"""The IPUEstimator's input: global batch sizes divided into each replica's, the input_fn called
with what it accepts, and its dataset shaped into what one Session.run of an instance consumes."""
from __future__ import annotations

import logging
from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu._estimator_spec import call_with_accepted
from popdist_launcher.ipu_runtime.datasets import UnshardedInputWarning

# The IPUEstimator's logger, as before.
log = logging.getLogger("popdist_launcher.ipu.ipu_estimator")


def per_replica_batch_size(global_size: Optional[int], name: str, instances: int,
                           replicas: int) -> Optional[int]:
    if global_size is None:
        return None
    if global_size % (instances * replicas):
        raise ValueError(
            f"{name} {global_size} is not divisible by {instances} worker(s) x {replicas} "
            f"replica(s) = {instances * replicas}; use a multiple of {instances * replicas}.")
    return global_size // (instances * replicas)


def unsharded_estimator_input_warning() -> UnshardedInputWarning:
    """The warning an IPUEstimator gives, once, for an input_fn's dataset not sharded across
    instances."""
    return UnshardedInputWarning(log, (
        "The IPUEstimator does not shard the input_fn's dataset across instances (as "
        "Graphcore's): each of the {instances} instances reads all of it, so every sample is "
        "seen {instances} times per epoch. Shard it in the input_fn before batching: dataset = "
        "dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex()), or take "
        "input_context and shard with input_context.num_input_pipelines and "
        "input_pipeline_id."))


class EstimatorInput:
    """The input methods of ``IPUEstimator`` (a base class of it, as tf.estimator's own
    ``_call_input_fn`` is replaced). They read the estimator's ``params``, ``config``,
    ``_batch_sizes``, ``_num_instances``, ``_instance_index``, ``_num_local``,
    ``_ipu_run_config``, ``_unsharded_input`` and ``_iterations(mode)``."""

    def _call_input_fn(self, input_fn, mode, input_context=None):
        from tensorflow_estimator.python.estimator import util as estimator_util

        params = dict(self.params)
        if self._batch_sizes[mode] is not None:
            params["batch_size"] = self._batch_sizes[mode]
        takes_context = "input_context" in estimator_util.fn_args(input_fn)
        context = tf.distribute.InputContext(
            num_input_pipelines=self._num_instances, input_pipeline_id=self._instance_index,
            num_replicas_in_sync=self._num_instances * self._num_local)
        with tf.device("/device:CPU:0"):
            dataset = call_with_accepted(input_fn, params=params, mode=mode,
                                         config=self.config, input_context=context)
            if not isinstance(dataset, tf.data.Dataset):
                raise ValueError(
                    f"input_fn must return a tf.data.Dataset of per-replica batches, got "
                    f"{type(dataset).__name__}.")
            if not takes_context:
                self._warn_if_not_sharded(dataset)
            return self._replica_batches(dataset, mode)

    def _warn_if_not_sharded(self, dataset: tf.data.Dataset) -> None:
        """Once per estimator, on instance 0: say how to shard an input that is not sharded."""
        self._unsharded_input.check(dataset, self._num_instances, self._instance_index)

    def _replica_batches(self, dataset: tf.data.Dataset, mode: str):
        """Elements of [iterations, local replicas, per-replica batch, ...]: what one
        Session.run of this instance consumes (each local replica its own batches)."""
        batch_size = self._batch_sizes[mode]
        if batch_size is not None:
            # Replicas step together on static shapes (as on the IPU): a short last batch
            # cannot be stacked with full ones, so it is left out.
            def full(*xs):
                first = tf.nest.flatten(xs)[0]
                return tf.equal(tf.shape(first)[0], batch_size)
            dataset = dataset.filter(full)
        dataset = dataset.batch(self._num_local, drop_remainder=True)
        dataset = dataset.batch(self._iterations(mode), drop_remainder=True)
        prefetch = self._ipu_run_config.prefetch_depth
        return dataset.prefetch(prefetch if prefetch else tf.data.AUTOTUNE)
