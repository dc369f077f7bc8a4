"""The extended part of an IPUStrategy with several local replicas: PopDistStrategy's
local-replica machinery for one instance (imported only when an IPUStrategy replicates)."""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import tensorflow as tf

from popdist_launcher.strategies._tf_internal import mirrored_strategy
from popdist_launcher.strategies.horovod_cross_device_ops import HorovodAllReduce
from popdist_launcher.strategies.popdist_strategy import HorovodExtended


class ReplicatedIPUExtended(HorovodExtended):
    """PopDistStrategy's local-replica machinery for one instance, without Horovod: mirrored
    variables on every local replica device, reductions summed on the host, and datasets
    distributed element by element (replica r of step s reads element s * R + r)."""

    def __init__(self, container_strategy, devices: Sequence[str]) -> None:
        # HorovodExtended's own __init__ joins the instances with Horovod; the replicas of an
        # IPUStrategy are this instance's only, so set up its state for one instance here.
        self._instance_index = 0
        self._num_instances = 1
        self._num_local = len(devices)
        self._variables_on_host = False
        self._warned_not_sharded = False
        self._host_device = "/device:CPU:0"
        ops = HorovodAllReduce(1, self._num_local, self._host_device)
        mirrored_strategy.MirroredExtended.__init__(self, container_strategy, devices=list(devices),
                                                    cross_device_ops=ops)
        self._cross_device_ops = ops
        self._input_grouped = False

    @contextlib.contextmanager
    def input_grouped(self, grouped: bool) -> Iterator[None]:
        """While it lasts, datasets handed to the strategy are already grouped by
        ``replica_elements`` (Keras fit on a dataset counts steps per replica that way)."""
        previous, self._input_grouped = self._input_grouped, grouped
        try:
            yield
        finally:
            self._input_grouped = previous

    def replica_elements(self, dataset):
        """Each element of the result holds the next R elements, concatenated on the batch
        axis, so that splitting it over R replicas gives each replica one whole element."""
        replicas = self._num_local

        def concat(t):
            if t.shape[1:].is_fully_defined():  # static shapes let TensorFlow split it evenly
                return tf.reshape(t, [replicas * t.shape[1], *t.shape[2:]])
            return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))

        def merge(*element):
            merged = tf.nest.map_structure(concat, element)
            return merged if len(element) > 1 else merged[0]

        return dataset.batch(replicas, drop_remainder=True).map(merge)

    def _experimental_distribute_dataset(self, dataset, options):
        if not self._input_grouped:
            dataset = self.replica_elements(dataset)
        return super()._experimental_distribute_dataset(dataset, options)

    def _make_dataset_iterator(self, dataset):
        return super()._make_dataset_iterator(self.replica_elements(dataset))
