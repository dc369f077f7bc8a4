"""Datasets read in place when an instance's only replica is the CPU its dataset lives on.

TensorFlow's distributed iterators hand every element through a MultiDeviceIterator (a buffer and
a background thread per replica device). Where an instance has one replica and it is the host's
CPU, that hand-over copies nothing and costs each step time: on TensorFlow 2.21 it made the
strategies' steps 10-35% slower than the same step reading the dataset directly (measured in
docs/benchmarks.md, "Where the strategies' step time went"). There the strategies give
TensorFlow's iterators options under which they read the dataset directly, after a prefetch
buffer of the size the MultiDeviceIterator would have kept, so input still overlaps the step.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import tensorflow as tf

from popdist_launcher.strategies._common import check_replication_mode
from popdist_launcher.ipu_runtime.tf_internal import input_util

_PER_WORKER = tf.distribute.InputReplicationMode.PER_WORKER
_PER_REPLICA = tf.distribute.InputReplicationMode.PER_REPLICA


def reads_in_place(replica_devices: Sequence[str], options) -> bool:
    """True when an instance's ``replica_devices`` are one CPU, the program runs eagerly (as
    TensorFlow 2 programs do) and ``options`` ask for the per-worker default."""
    if len(replica_devices) != 1 or not tf.compat.v1.executing_eagerly_outside_functions():
        return False
    if (tf.DeviceSpec.from_string(replica_devices[0]).device_type or "").upper() != "CPU":
        return False
    return options is None or options.experimental_replication_mode == _PER_WORKER


def direct_options(options) -> "tf.distribute.InputOptions":
    """Options under which TensorFlow's iterators read the dataset directly, on the host (the
    per-replica mode without fetching to a device: the one mode that skips the
    MultiDeviceIterator). With one replica per instance it reads the same elements."""
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=False,
        experimental_replication_mode=_PER_REPLICA,
        experimental_place_dataset_on_device=False,
        experimental_per_replica_buffer_size=buffer_size(options))


def buffer_size(options) -> int:
    """The elements the MultiDeviceIterator would have buffered (TensorFlow's default, 1)."""
    return options.experimental_per_replica_buffer_size if options is not None else 1


def for_dataset(replica_devices: Sequence[str], dataset: tf.data.Dataset, options
                ) -> Tuple[tf.data.Dataset, Optional["tf.distribute.InputOptions"]]:
    """(dataset, options) to hand TensorFlow's distributed dataset: read in place behind a
    prefetch buffer where :func:`reads_in_place`, unchanged elsewhere."""
    if not reads_in_place(replica_devices, options):
        return dataset, options
    return dataset.prefetch(buffer_size(options)), direct_options(options)


def for_dataset_fn(replica_devices: Sequence[str], dataset_fn: Callable, options
                   ) -> Tuple[Callable, Optional["tf.distribute.InputOptions"]]:
    """:func:`for_dataset` for a function that makes the dataset from an input context."""
    if not reads_in_place(replica_devices, options):
        return dataset_fn, options

    def prefetched_dataset_fn(input_context):
        return dataset_fn(input_context).prefetch(buffer_size(options))

    return prefetched_dataset_fn, direct_options(options)


def datasets_from_function(extended, dataset_fn: Callable, options):
    """``distribute_datasets_from_function`` for a strategy's ``extended`` whose instance is one
    input pipeline (its ``_make_input_context``): TensorFlow's, with :func:`for_dataset_fn`."""
    check_replication_mode(options)
    input_workers = extended._input_workers_with_options(options)  # noqa: SLF001
    dataset_fn, options = for_dataset_fn(extended.worker_devices, dataset_fn, options)
    return input_util.get_distributed_datasets_from_function(
        dataset_fn=dataset_fn, input_workers=input_workers,
        input_contexts=[extended._make_input_context()],  # noqa: SLF001
        strategy=extended._container_strategy(), options=options)  # noqa: SLF001
