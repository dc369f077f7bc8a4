"""IPUMultiWorkerStrategy: between-graph replication with TensorFlow's own collective ops over
gRPC, the cluster taken from TF_CONFIG (which poprun-lite writes for every instance).

TensorFlow's CollectiveAllReduceExtended does the work; this subclass makes each instance's
local replicas (logical CPU devices, or GPUs) its devices and can keep variables on the host.
Datasets are auto-sharded across instances as TensorFlow (and so Graphcore's strategy) does: a
program batches with the global batch size and does not shard by itself (a warning says so when
a dataset is already sharded).
TF1 sessions (the IPUEstimator's too) run its collectives through this worker's gRPC server:
``tf.compat.v1.Session(strategy.session_target(), config=strategy.update_config_proto(...))``.
"""
from __future__ import annotations

from typing import Dict

import itertools
import logging

import tensorflow as tf

from popdist_launcher import runtime, tf_config
from popdist_launcher.ipu_runtime import ipu_devices, jit_functions
from popdist_launcher.ipu_runtime.datasets import is_sharded
from popdist_launcher.ipu_runtime.tf_internal import (TFConfigClusterResolver,
                                                      collective_all_reduce_strategy, device_util,
                                                      eager_context, input_util, nest,
                                                      values_lib, variable_scope)
from popdist_launcher.ipu_runtime.variables import as_ipu_variable
from popdist_launcher.strategies import _coordination, _graph_placement, _host_input
from popdist_launcher.strategies._common import (call_for_the_only_replica,
                                                 check_replication_mode, resolve_reduce_op)

log = logging.getLogger(__name__)

# This process's gRPC servers started for graph-mode sessions, by address (one per process).
_SERVERS: Dict[str, tf.distribute.Server] = {}
# Collective group keys of the second and later eager strategies of a process (TensorFlow's
# start at 1; a strategy uses a handful).
_LATER_KEY_BASES = itertools.count(10000, 10000)


def _collective_ops_enabled_for(cluster_resolver):
    """The ServerDef with which this process's eager context already runs collective ops for
    the worker ``cluster_resolver`` names (same cluster, task and protocol), as an earlier
    multi-worker strategy of the program enabled them; else None."""
    enabled = getattr(eager_context.context(), "_collective_ops_server_def", None)
    if enabled is None:
        return None
    same = (enabled.cluster == cluster_resolver.cluster_spec().as_cluster_def()
            and enabled.job_name == cluster_resolver.task_type
            and enabled.task_index == cluster_resolver.task_id
            and enabled.protocol == (cluster_resolver.rpc_layer or "grpc"))
    return enabled if same else None


class IPUMultiWorkerExtended(collective_all_reduce_strategy.CollectiveAllReduceExtended):
    def __init__(self, container_strategy, cluster_resolver, variables_on_host: bool) -> None:
        self._variables_on_host = variables_on_host
        # Before TensorFlow starts its gRPC server. As Graphcore's strategy, one replica per
        # worker (its IPUs may hold a pipeline's stages), or the launch's replicas per instance.
        devices = ipu_devices.local_replica_devices()
        self._replica_devices = devices[:max(1, runtime.num_local_replicas())]
        enabled = _collective_ops_enabled_for(cluster_resolver)
        if enabled is not None:
            # A strategy before this one enabled this worker's collective ops. TensorFlow would
            # enable them again, replacing the collective executors while a peer may still read
            # what this worker sent it (the peer fails: "Delete called on non-empty
            # BufRendezvous"). They serve this strategy as they are, with collective keys of
            # its own (every worker makes its strategies in the same order), and as TensorFlow
            # does when it enables them, the coordination service's heartbeat, where it runs,
            # stands for the strategy's own health checks.
            self._std_server_started = True
            container_strategy._collective_key_base = next(_LATER_KEY_BASES)  # noqa: SLF001
            if enabled.default_session_config.experimental.coordination_config.service_type:
                self._enable_check_health = False
        with _coordination.launcher_heartbeat():
            super().__init__(container_strategy, cluster_resolver=cluster_resolver,
                             communication_options=tf.distribute.experimental.CommunicationOptions())

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        kinds = {"GPU" if "GPU" in d.upper() else "CPU" for d in self._replica_devices}
        local = tuple(f"{worker_device}/device:{d.split('device:')[-1]}"
                      for d in self._replica_devices)
        return local, kinds.pop()

    def _call_for_each_replica(self, fn, args, kwargs):
        # what a replica computes reads as the IPU its device stands for (ipu_runtime.ipu_devices)
        if len(self.worker_devices) > 1:
            result = super()._call_for_each_replica(
                ipu_devices.on_replica_ipu(fn, mirrored=True), args, kwargs)
            return ipu_devices.name_replica_outputs(result) \
                if ipu_devices.is_tf_function(fn) else result
        _graph_placement.answer_values_of_one_replica((args, kwargs))
        return call_for_the_only_replica(self, ipu_devices.on_replica_ipu(fn), args, kwargs)

    # ---- input: TensorFlow's, except that one CPU replica reads its dataset in place ---------
    def _experimental_distribute_dataset(self, dataset, options):
        check_replication_mode(options)
        self._warn_if_sharded_twice(dataset)
        input_workers = self._input_workers_with_options(options)
        dataset, options = _host_input.for_dataset(self.worker_devices, dataset, options)
        return input_util.get_distributed_dataset(
            dataset, input_workers, self._container_strategy(),
            num_replicas_in_sync=self._num_replicas_in_sync,
            input_context=self._make_input_context(), options=options)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        return _host_input.datasets_from_function(self, dataset_fn, options)

    def _warn_if_sharded_twice(self, dataset) -> None:
        """Once per strategy, on the chief: a dataset the program sharded is sharded again."""
        if (self._num_workers == 1 or self._id_in_cluster != 0
                or getattr(self, "_warned_sharded_twice", False)):
            return
        policy = dataset.options().experimental_distribute.auto_shard_policy
        if policy == tf.data.experimental.AutoShardPolicy.OFF or not is_sharded(dataset):
            return
        self._warned_sharded_twice = True
        log.warning(
            "IPUMultiWorkerStrategy shards datasets across its %d instances itself (TensorFlow's "
            "auto-sharding, as with Graphcore's IPUMultiWorkerStrategy) and this dataset is "
            "already sharded, so each instance reads 1/%d of it. Remove the dataset.shard(...) "
            "call and batch with the global batch size: each instance takes its part.",
            self._num_workers, self._num_workers ** 2)

    def _get_variable_creator_initial_value(self, replica_id, device, primary_var, **kwargs):
        if replica_id == 0 and _is_global_step(kwargs):
            # The global step starts at 0 everywhere and must not be broadcast: TensorFlow's
            # global-step read (tf.compat.v1.train's, fetched by the chief's checkpoint, summary
            # and step-counter hooks) evaluates initial_value, so a broadcast in it would run a
            # collective on the chief alone, and the chief would wait for it forever.
            return kwargs["initial_value"]
        if replica_id != 0:
            return super()._get_variable_creator_initial_value(replica_id, device, primary_var,
                                                               **kwargs)
        # As Graphcore's strategy: the first replica's initial value is made (and broadcast from
        # the chief) on the host, wherever the variable lies; in a TF1 graph its ops are
        # colocated in the group ``loc:@cpu``.
        initial_value_fn = super()._get_variable_creator_initial_value(
            0, self._host_device(), None, **kwargs)
        return _graph_placement.on_host_group(initial_value_fn)

    def _reduce_to(self, reduce_op, value, destinations, options):
        value = _graph_placement.through_host(value, self._host_device())
        return super()._reduce_to(reduce_op, value, destinations, options)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        host = self._host_device()
        pairs = [(_graph_placement.through_host(v, host), d) for v, d in value_destination_pairs]
        return super()._batch_reduce_to(reduce_op, pairs, options)

    def _host_device(self) -> str:
        """This worker's host CPU, in full (``/job:worker/replica:0/task:1/device:CPU:0``)."""
        return device_util.canonicalize(f"{self._worker_device}/device:CPU:0")

    def _session_target(self, config_proto) -> str:
        """The master of a TF1 Session that runs this strategy's collectives: this worker's
        gRPC server. Built with eager execution on, the strategy started that server itself
        (TensorFlow's context server); with eager execution off it is started here, once."""
        if not self._cluster_spec:
            return ""
        address = self._cluster_spec.task_address(self._task_type, self._task_id)
        if not getattr(self, "_std_server_started", False) and address not in _SERVERS:
            # Kept outside the strategy: tf.estimator deep-copies its RunConfig, strategy
            # included, and a server cannot be copied.
            _SERVERS[address] = tf.distribute.Server(
                self._cluster_spec, job_name=self._task_type, task_index=self._task_id,
                protocol=self._rpc_layer or "grpc",
                config=self._update_config_proto(config_proto), start=True)
        return f"grpc://{address}"

    def _create_variable(self, next_creator, **kwargs):
        # Sync-on-read variables (metrics, moving statistics) stay on the IPU even with
        # variables_on_host, as in Graphcore's strategy: only a read reduces them on the host.
        on_read = kwargs.get("synchronization") == variable_scope.VariableSynchronization.ON_READ
        if not self._variables_on_host or on_read:
            # on a replica device: it reads as that device's IPU
            return as_ipu_variable(super()._create_variable(
                ipu_devices.on_replica_ipu(_graph_placement.in_ipu_container(next_creator)),
                **kwargs))
        host = self._host_device()

        def on_host(**kw):
            # In a TF1 graph a host variable is read through a snapshot on the replica's IPU
            # (Graphcore's caching device): ``value()`` reads as the IPU, the variable as the host.
            _graph_placement.cache_on_replica_ipu(kw)
            with tf.device(host):
                return next_creator(**kw)

        return as_ipu_variable(super()._create_variable(on_host, **kwargs))


class IPUMultiWorkerStrategy(collective_all_reduce_strategy.CollectiveAllReduceStrategy):
    """Multi-worker data parallelism with TensorFlow collectives; cluster from TF_CONFIG. A
    ``tf.function(jit_compile=True)`` run under it runs without XLA (see
    ``ipu_runtime.jit_functions``)."""

    _ipu_layer = True

    def __init__(self, cluster_resolver=None, ipu_device: str = "/device:IPU:0",
                 variables_on_host: bool = False) -> None:
        if cluster_resolver is None:
            # one-sentence errors for a malformed or missing (--tf-config none) TF_CONFIG
            tf_config.require_cluster("IPUMultiWorkerStrategy")
            cluster_resolver = TFConfigClusterResolver()
        self._ipu_device = ipu_device
        tf.distribute.Strategy.__init__(
            self, IPUMultiWorkerExtended(self, cluster_resolver, variables_on_host))
        from tensorflow.python.distribute import distribute_lib
        distribute_lib.distribution_strategy_gauge.get_cell("V2").set("IPUMultiWorkerStrategy")
        jit_functions.install()

    def reduce(self, reduce_op, value, axis=None):
        """Each value of a nested ``value`` reduced (Keras 3's fit reduces a batch's structure);
        a scalar has no ``axis`` to reduce first (Keras 3 asks for axis 0 of its scalar logs
        under a multi-worker strategy, which stock TensorFlow refuses: tensorflow#72388)."""
        reduce_op, strategy = resolve_reduce_op(reduce_op), super()

        def reduce_one(v):
            part = v.values[0] if isinstance(v, values_lib.DistributedValues) else v
            scalar = getattr(getattr(part, "shape", None), "rank", None) == 0
            return strategy.reduce(reduce_op, v, None if scalar else axis)

        return nest.map_structure(reduce_one, value)

    def run(self, fn, args=(), kwargs=None, options=None):
        jit_functions.host_operation("IPUMultiWorkerStrategy.run")
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    def experimental_run_v2(self, fn, args=(), kwargs=None, options=None):
        return self.run(fn, args=args, kwargs=kwargs, options=options)

    def session_target(self, config_proto=None) -> str:
        """The ``master`` for a ``tf.compat.v1.Session`` (with ``update_config_proto``'s config)
        that runs this strategy's collectives across instances; "" (in-process) on one worker."""
        config_proto = config_proto if config_proto is not None else tf.compat.v1.ConfigProto()
        return self.extended._session_target(config_proto)  # noqa: SLF001

    def update_config_proto(self, config_proto):
        """The session config a TF1-style ``tf.compat.v1.Session`` needs for this strategy."""
        return self.extended._update_config_proto(config_proto)  # noqa: SLF001


def _is_global_step(variable_kwargs) -> bool:
    collections = variable_kwargs.get("collections") or ()
    name = str(variable_kwargs.get("name") or "").split(":")[0]
    return (tf.compat.v1.GraphKeys.GLOBAL_STEP in collections
            or name == tf.compat.v1.GraphKeys.GLOBAL_STEP)
