"""PopDistStrategy and IPUHorovodStrategy: data parallelism over every replica of every instance,
with Horovod (through ``popdist_launcher.collectives``) for all cross-instance communication.

Built by overriding the documented hooks of TensorFlow's MirroredExtended: local replicas are
devices of this instance, reductions go through HorovodAllReduce (within the instance, then
across instances), and initial values are broadcast from instance 0. As Graphcore's (a collective
strategy with an empty cluster), a dataset is never sharded across instances: each instance
reads the dataset it is given (the program shards it by instance index). As on Graphcore's
systems, where the local replicas are one replicated device program fed by one infeed, each
local replica reads its own elements of that dataset: at a step, local replica r of L takes the
step's r-th of L consecutive elements, so a dataset batched with B per replica trains on
B x getNumTotalReplicas() samples per step.

PopDistStrategy reduces as Graphcore's does by where the reduction runs. Inside ``strategy.run``
(on the IPU there: ``ReplicaContext.all_reduce``, a ``merge_call`` reduction, an optimizer's
gradient sum) it spans the replicas of the configured IPU system: every replica of the job when
configure_ipu_system applied ``experimental.multi_replica_distribution`` over the job's instances
(``popdist.tensorflow.set_ipu_config`` / ``update_ipu_config`` before ``configure_ipu_system``) or
when the program configured no IPU system, and the instance's own replicas otherwise; none with
``add_ipu_cross_replica_reductions=False``. From the host (``strategy.reduce`` after ``run``,
sync-on-read reads) it spans every replica of the job. IPUHorovodStrategy reduces on the host,
over every replica of the job, wherever it is asked.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import tensorflow as tf

from popdist_launcher import collectives, runtime
from popdist_launcher.ipu_runtime import (config as ipu_config, configured_system, ipu_devices,
                                          jit_functions)
from popdist_launcher.ipu_runtime.datasets import UnshardedInputWarning
from popdist_launcher.ipu_runtime.tf_internal import (CheckpointInitialValue, cross_device_ops_lib,
                                                      distribute_lib, distribute_utils,
                                                      input_lib_v1, input_util, mirrored_strategy,
                                                      nest, reduce_util, values_lib)
from popdist_launcher.ipu_runtime.variables import as_ipu_variable
from popdist_launcher.strategies import _host_input
from popdist_launcher.strategies._common import (call_for_the_only_replica,
                                                 check_replication_mode, resolve_reduce_op)
from popdist_launcher.strategies.horovod_cross_device_ops import HorovodAllReduce

log = logging.getLogger(__name__)

class HorovodExtended(mirrored_strategy.MirroredExtended):
    """MirroredExtended whose replicas span all instances.

    With ``ipu_reductions`` (PopDistStrategy) a reduction made while the replicas run reaches
    as far as the configured IPU system's replication (see the module docstring); without it
    (IPUHorovodStrategy) every reduction spans the job.
    """

    # Defaults for subclasses that skip __init__ (ipu._replicated: one instance's replicas).
    _ipu_reductions = False
    _add_ipu_cross_replica_reductions = True  # Graphcore's name; its test turns it off here
    _replicas_running = 0  # > 0 while _call_for_each_replica runs the replicas
    _warned_instance_reach = False

    def __init__(self, container_strategy, variables_on_host: bool = False,
                 ipu_reductions: bool = False) -> None:
        collectives.init()
        ctx = runtime.context()
        if collectives.size() != ctx.num_instances:
            raise ValueError(
                f"Horovod sees {collectives.size()} process(es) but "
                f"{ctx.launcher or 'the environment'} started {ctx.num_instances} instance(s); "
                f"start every instance through one launcher (e.g. poprun-lite -np N).")
        devices = ipu_devices.local_replica_devices()
        self._instance_index = collectives.rank()
        self._num_instances = collectives.size()
        self._num_local = len(devices)
        self._variables_on_host = variables_on_host
        self._unsharded_input = unsharded_input_warning(type(container_strategy).__name__)
        self._input_grouped = False
        self._host_device = "/device:CPU:0"
        self._ipu_reductions = ipu_reductions
        ops = HorovodAllReduce(self._num_instances, self._num_local * self._num_instances,
                               self._host_device)
        self._instance_ops = HorovodAllReduce(1, self._num_local, self._host_device)
        super().__init__(container_strategy, devices=devices, cross_device_ops=ops)
        self._cross_device_ops = ops
        log.debug("%s: instance %d of %d, local replicas %s", type(container_strategy).__name__,
                  self._instance_index, self._num_instances, devices)

    # ---- replicas ------------------------------------------------------------------------
    @property
    def _num_replicas_in_sync(self) -> int:
        return self._num_local * self._num_instances

    @property
    def _global_batch_size(self) -> bool:
        """False: a fixed batch (``keras.Input(batch_size=B)``) and the datasets are per replica,
        as with Graphcore's strategies, whose replicas each take the dataset's micro-batch
        (Keras divides a fixed batch by the replicas in sync only for a strategy that batches
        globally)."""
        return False

    def _get_replica_id_in_sync_group(self, replica_id):
        return self._instance_index * self._num_local + replica_id

    def _get_local_replica_id(self, replica_id_in_sync_group):
        return replica_id_in_sync_group - self._instance_index * self._num_local

    def _in_multi_worker_mode(self) -> bool:
        return self._num_instances > 1

    @property
    def experimental_between_graph(self) -> bool:
        return True

    @property
    def should_checkpoint(self) -> bool:
        return self._instance_index == 0

    @property
    def should_save_summary(self) -> bool:
        return self._instance_index == 0

    def _use_merge_call(self) -> bool:
        return True  # every cross-replica reduction goes through _batch_reduce_to

    def _call_for_each_replica(self, fn, args, kwargs):
        self._replicas_running += 1
        try:
            return self._run_replicas(fn, args, kwargs)
        finally:
            self._replicas_running -= 1

    def _run_replicas(self, fn, args, kwargs):
        # what a replica computes reads as the IPU its device stands for (ipu_runtime.ipu_devices)
        if self._num_local > 1:
            result = super()._call_for_each_replica(
                ipu_devices.on_replica_ipu(fn, mirrored=True), args, kwargs)
            return ipu_devices.name_replica_outputs(result) \
                if ipu_devices.is_tf_function(fn) else result
        return call_for_the_only_replica(self, ipu_devices.on_replica_ipu(fn), args, kwargs)

    # ---- variables -----------------------------------------------------------------------
    def _get_variable_creator_initial_value(self, replica_id, device, primary_var, **kwargs):
        if replica_id != 0 or _is_global_step(kwargs):
            # The global step starts at 0 everywhere. It must not broadcast: TensorFlow's
            # global-step read evaluates initial_value, which would run a collective on
            # whichever instance reads the step (a hook on the chief) and on no other.
            return super()._get_variable_creator_initial_value(
                replica_id, device, primary_var, **kwargs)
        initial_value = kwargs["initial_value"]
        dtype = kwargs.get("dtype", None)
        num_instances = self._num_instances
        host = self._host_device

        def broadcast_initial_value():
            value = initial_value() if callable(initial_value) else initial_value
            if isinstance(value, CheckpointInitialValue):
                value = value.wrapped_value
            value = tf.convert_to_tensor(value, dtype=dtype)
            if num_instances == 1:
                return value
            with tf.device(host):
                return collectives.broadcast(value, root_rank=0)

        return broadcast_initial_value

    def _create_variable(self, next_creator, **kwargs):
        if not self._variables_on_host:  # on a replica device: it reads as that device's IPU
            return as_ipu_variable(super()._create_variable(
                ipu_devices.on_replica_ipu(next_creator), **kwargs))

        def on_host(**kw):
            with tf.device(self._host_device):
                return next_creator(**kw)

        return as_ipu_variable(super()._create_variable(on_host, **kwargs))

    # ---- reductions ----------------------------------------------------------------------
    def _get_cross_device_ops(self, value):
        return self._cross_device_ops

    def _reduce_to(self, reduce_op, value, destinations, options):
        reduce_op = resolve_reduce_op(reduce_op)
        ops = self._reduction_ops()
        if ops is None or (isinstance(value, values_lib.Mirrored)
                           and reduce_op == reduce_util.ReduceOp.MEAN):
            return value

        def reduce_one(v):
            v = self._per_replica(v)
            return ops.reduce(reduce_op, v, _placed(destinations, v))

        return nest.map_structure(reduce_one, value)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        reduce_op = resolve_reduce_op(reduce_op)
        ops = self._reduction_ops()
        if ops is None:  # each replica keeps its own value
            return [value for value, _ in value_destination_pairs]
        pairs = []
        for value, destination in value_destination_pairs:
            value = self._per_replica(value)
            pairs.append((value, _placed(destination, value)))
        return ops.batch_reduce(reduce_op, pairs)

    def reduction_reach(self) -> int:
        """How many replicas a reduction asked for now spans, add_ipu_cross_replica_reductions
        aside: the job's or the instance's (``ipu.cross_replica_ops`` count them, and the
        replication index counts within them)."""
        within_instance = self._ipu_reductions and self._replicas_running and \
            self._configured_ops() is self._instance_ops
        return self._num_local if within_instance else self._num_replicas_in_sync

    def _reduction_ops(self):
        """The cross-device ops of a reduction asked for now, or None for no reduction.

        Graphcore's PopDistStrategy reduces with GCL on the IPU, inside the replicas' program,
        whose replicas are those of the configured IPU system, and with PopDist on the host.
        Here "on the IPU" is "while the replicas run" (ReplicaContext.all_reduce, merge_call).
        """
        if not (self._ipu_reductions and self._replicas_running):
            return self._cross_device_ops
        if not self._add_ipu_cross_replica_reductions:
            return None
        return self._configured_ops()

    def _configured_ops(self):
        """The job's ops, or the instance's where the IPU system replicates within it only."""
        if self._num_instances == 1 or _replicated_over_instances(self._num_instances,
                                                                   self._instance_index):
            return self._cross_device_ops
        if not self._warned_instance_reach:
            self._warned_instance_reach = True
            log.warning(
                "%s: the IPU system was configured without multi-replica distribution, so a "
                "reduction inside strategy.run (ReplicaContext.all_reduce, an optimizer's "
                "gradient sum) spans this instance's %d replica(s) only, not the %d of the job, "
                "as on IPUs. To reduce over the job, call popdist.tensorflow.set_ipu_config("
                "config, ...) or strategy.update_ipu_config(config) before "
                "config.configure_ipu_system().", type(self._container_strategy()).__name__,
                self._num_local, self._num_replicas_in_sync)
        return self._instance_ops

    def _per_replica(self, value):
        """``value`` with one part per local replica, each on its replica's device. A value
        that is not per replica is the same value on every replica: each local replica holds
        it. ReplicaContext.all_reduce hands over such a value when all local replicas pass the
        same tensor (an input, a captured constant): merge_call regroups identical objects into
        that one object, which still counts once per replica (as Graphcore's cross-replica
        sum)."""
        if isinstance(value, values_lib.DistributedValues):
            return value
        if not isinstance(value, tf.IndexedSlices):
            value = tf.convert_to_tensor(value)

        def copy_on(device):
            with tf.device(device):
                if isinstance(value, tf.IndexedSlices):
                    return tf.IndexedSlices(tf.identity(value.values), tf.identity(value.indices),
                                            value.dense_shape)
                return tf.identity(value)

        return values_lib.PerReplica([copy_on(device) for device in self.worker_devices])

    def _gather_to_implementation(self, value, destinations, axis, options):
        return self._cross_device_ops._gather(self._per_replica(value),  # noqa: SLF001
                                              destinations=destinations, axis=axis)

    # ---- input ---------------------------------------------------------------------------
    def _make_input_context(self) -> distribute_lib.InputContext:
        return distribute_lib.InputContext(num_input_pipelines=self._num_instances,
                                           input_pipeline_id=self._instance_index,
                                           num_replicas_in_sync=self._num_replicas_in_sync)

    @property
    def num_local_replicas(self) -> int:
        """The replicas of this instance; each reads its own dataset elements."""
        return self._num_local

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
        """Each element of the result holds the next L elements (L local replicas) concatenated
        on the batch axis, so that splitting it over the local replicas gives each one whole
        element; a last group of fewer than L elements is dropped. Unchanged when L is 1."""
        replicas = self._num_local
        if replicas == 1:
            return dataset

        def concat(t):
            if t.shape[1:].is_fully_defined():  # static shapes let TensorFlow split it evenly
                return tf.reshape(t, [replicas * t.shape[1], *t.shape[2:]])
            return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))

        def merge(*element):
            merged = tf.nest.map_structure(concat, element)
            return merged if len(element) > 1 else merged[0]

        return dataset.batch(replicas, drop_remainder=True).map(merge)

    def _experimental_distribute_dataset(self, dataset, options):
        check_replication_mode(options)
        self._warn_if_not_sharded(dataset)
        if not self._input_grouped:
            dataset = self.replica_elements(dataset)
        # This instance's dataset, one element per local replica: no input context, so
        # TensorFlow shards nothing across instances.
        input_workers = self._input_workers_with_options(options)
        dataset, options = _host_input.for_dataset(self.worker_devices, dataset, options)
        return input_util.get_distributed_dataset(
            dataset, input_workers, self._container_strategy(),
            num_replicas_in_sync=self._num_local, options=options)

    def _warn_if_not_sharded(self, dataset) -> None:
        """Once per strategy, on instance 0: say how to shard a dataset that is not sharded."""
        self._unsharded_input.check(dataset, self._num_instances, self._instance_index)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        return _host_input.datasets_from_function(self, dataset_fn, options)

    def _make_dataset_iterator(self, dataset):
        self._warn_if_not_sharded(dataset)
        return input_lib_v1.DatasetIterator(
            self.replica_elements(dataset), self._input_workers, self._container_strategy(),
            num_replicas_in_sync=self._num_local)

    def _make_input_fn_iterator(self, input_fn,
                                replication_mode=distribute_lib.InputReplicationMode.PER_WORKER):
        return input_lib_v1.InputFunctionIterator(
            input_fn, self._input_workers, [self._make_input_context()],
            self._container_strategy())

    def _experimental_distribute_values_from_function(self, value_fn):
        per_replica = []
        for local_id in range(self._num_local):
            context = distribute_lib.ValueContext(
                self._get_replica_id_in_sync_group(local_id), self._num_replicas_in_sync)
            per_replica.append(value_fn(context))
        return distribute_utils.regroup(per_replica, always_wrap=True)


def unsharded_input_warning(strategy_name: str) -> UnshardedInputWarning:
    """The warning a strategy gives, once, for a dataset not sharded across instances."""
    return UnshardedInputWarning(log, (
        f"{strategy_name} does not shard datasets across instances (as Graphcore's): each of "
        "the {instances} instances reads the whole dataset it was given, so every sample is "
        "seen {instances} times per epoch. Shard it by instance before batching: dataset = "
        "dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())."))


def _replicated_over_instances(num_instances: int, instance_index: int) -> bool:
    """Whether the IPU system in effect replicates over the job's instances: configured with
    ``experimental.multi_replica_distribution`` for them, or not configured at all (the program
    then runs on the replicas the launcher made, as on the host). ValueError when configured
    for other instances than the launcher started."""
    system = configured_system.get_configured_system()
    if system is None:
        return True
    if not system.multi_replica_distribution:
        return False
    if (system.process_count, system.process_index) != (num_instances, instance_index):
        raise ValueError(
            f"the IPU system was configured with multi_replica_distribution process_count="
            f"{system.process_count}, process_index={system.process_index}, but this is "
            f"instance {instance_index} of {num_instances}; set them with "
            f"popdist.tensorflow.set_ipu_config(config) before configure_ipu_system().")
    return True


def _placed(destinations, per_replica):
    """``destinations``, or the devices of ``per_replica`` where it names no device:
    ReplicaContext.all_reduce gives a tensor its own device as the destination, which is empty
    for a tensor built in a tf.function outside any device scope; the result belongs on the
    replicas' devices."""
    if cross_device_ops_lib.check_destinations(destinations):
        return destinations
    return per_replica


def _is_global_step(variable_kwargs) -> bool:
    collections = variable_kwargs.get("collections") or ()
    name = str(variable_kwargs.get("name") or "").split(":")[0]
    return (tf.compat.v1.GraphKeys.GLOBAL_STEP in collections
            or name == tf.compat.v1.GraphKeys.GLOBAL_STEP)


class _HorovodStrategyBase(distribute_lib.Strategy):
    """Shared API of the Horovod-backed strategies; a ``tf.function(jit_compile=True)`` run
    under one runs without XLA (see ``ipu_runtime.jit_functions``)."""

    _ipu_layer = True

    def __init__(self, extended: HorovodExtended) -> None:
        super().__init__(extended)
        jit_functions.install()
        from popdist_launcher.ipu_runtime import keras_extensions
        keras_extensions.install_keras_3()  # Keras 3's fit counts the steps the strategy runs

    @property
    def _collective_key_base(self) -> int:
        # MirroredExtended reads it from its container while being built; unused by Horovod.
        return id(self)

    def reduce(self, reduce_op, value, axis=None):
        return super().reduce(resolve_reduce_op(reduce_op), value, axis)

    def run(self, fn, args=(), kwargs=None, options=None):
        jit_functions.host_operation(f"{type(self).__name__}.run")
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    def experimental_run_v2(self, fn, args=(), kwargs=None, options=None):
        """The TF 2.0/2.1 name of ``run``, still used by IPU-era code."""
        return self.run(fn, args=args, kwargs=kwargs, options=options)

    def update_ipu_config(self, config: ipu_config.IPUConfig) -> ipu_config.IPUConfig:
        """Set the multi-replica distribution options of ``config`` for this launch; return it."""
        return ipu_config.set_ipu_config(config, configure_device=False)


class PopDistStrategy(_HorovodStrategyBase):
    """Data parallelism over all replicas of all instances started by poprun-lite.

    ``num_replicas_in_sync`` counts global replicas (local replicas included); variables start
    from instance 0's values; mirrored variables stay identical; sync-on-read variables are
    reduced over every replica when read; only instance 0 checkpoints and writes summaries.
    Reductions inside ``run`` span the configured IPU system's replicas (the module docstring
    says which); ``add_ipu_cross_replica_reductions=False`` leaves each replica its own value
    there, as Graphcore's.
    """

    def __init__(self, ipu_device: str = "/device:IPU:0",
                 add_ipu_cross_replica_reductions: bool = True,
                 enable_dataset_iterators: bool = True,
                 enable_keras_extensions: bool = True) -> None:
        self._ipu_device = ipu_device
        super().__init__(HorovodExtended(self, ipu_reductions=True))
        self.extended._add_ipu_cross_replica_reductions = add_ipu_cross_replica_reductions
        if enable_keras_extensions:  # model.set_gradient_accumulation_options ..., as Graphcore's
            from popdist_launcher.ipu_runtime import keras_extensions
            keras_extensions.install()


class IPUHorovodStrategy(_HorovodStrategyBase):
    """Horovod for everything; ``variables_on_host`` keeps variables (and slots) on the host."""

    def __init__(self, ipu_device: str = "/device:IPU:0", variables_on_host: bool = False) -> None:
        self._ipu_device = ipu_device
        super().__init__(HorovodExtended(self, variables_on_host=variables_on_host))
