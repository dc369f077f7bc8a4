"""``ipu.ipu_strategy``: IPUStrategyV1 (and its alias IPUStrategy), the single-process strategy
of Graphcore's TF2 API.

With one local IPU device (``auto_select_ipus = 1``, or ``ipu_device`` other than IPU:0) the
strategy runs one replica on the local device that stands for ``/device:IPU:N`` (a logical CPU
device or a GPU, see ``ipu.config``). When IPUConfig selects several local IPUs (one TF device
per replica), it replicates as Graphcore's does: ``run`` executes the function on every local
replica, each replica reads its own dataset elements (consecutive elements go to replicas
0, 1, ...; the batch a replica sees is the dataset's batch), gradients are summed over the
replicas, ``ipu.cross_replica_ops`` reduce over them and outfeeds gain a replica axis.
``num_replicas_in_sync`` stays 1, as on an IPU system, where replication happens inside the
device program (so Keras does not scale losses by the replica count); for the same reason
``run`` returns replica 0's results as plain values, as Graphcore's executor reads a replicated
program's outputs back from replica 0 (the other replicas' values reach the host through
outfeeds), and ``reduce`` leaves such a value as it is. Keras, TensorFlow and this package call
``run`` for their own functions and get every replica's results (Keras's ``predict`` returns the
predictions of every replica). Replicas are local to
the instance: under poprun-lite each instance trains its own (PopDistStrategy trains across
instances). Creating one installs the Keras extensions (``model.set_gradient_accumulation_options``
...), see ``ipu_runtime.keras_extensions``.
"""
from __future__ import annotations

import functools
import logging

import tensorflow as tf

from popdist_launcher.ipu_runtime import configured_system, ipu_devices, jit_functions
from popdist_launcher.ipu_runtime.tf_internal import (distribute_lib, one_device_strategy,
                                                      values_lib)

log = logging.getLogger(__name__)


class _OneIPUExtended(one_device_strategy.OneDeviceExtended):
    """One replica on the local device standing for an IPU: its variables, ops and results
    read as that IPU, as Graphcore's IPUStrategy places them (see ``ipu_runtime.ipu_devices``)."""

    def _create_variable(self, next_creator, **kwargs):
        return super()._create_variable(ipu_devices.on_replica_ipu(next_creator), **kwargs)

    def _call_for_each_replica(self, fn, args, kwargs):
        return super()._call_for_each_replica(ipu_devices.on_replica_ipu(fn), args, kwargs)


def _device_ordinal(ipu_device: str) -> int:
    tail = ipu_device.rsplit(":", 1)[-1]
    if "IPU" not in ipu_device.upper() or not tail.isdigit():
        raise ValueError(f"ipu_device must look like '/device:IPU:0', got {ipu_device!r}.")
    return int(tail)


class IPUStrategyV1(tf.distribute.OneDeviceStrategy):
    """Graphcore's IPUStrategy: one replica on the device standing for ``ipu_device``, or, when
    IPUConfig selects several local IPUs and ``ipu_device`` is IPU:0, one replica on each.

    ``enable_dataset_iterators`` is accepted for Graphcore's signature (datasets are always
    iterated on the host here); ``enable_keras_extensions`` adds the IPU Keras methods to Keras
    models (True by default, as in Graphcore's). A ``tf.function(jit_compile=True)`` run under
    it runs without XLA (see ``ipu_runtime.jit_functions``).
    """

    _ipu_layer = True
    # The Keras extensions' mark of this strategy and its subclasses (the replicas of one
    # process's IPU system): read by attribute, so that they need not import this module.
    _emulates_ipus = True

    def __init__(self, ipu_device: str = "/device:IPU:0", cpu_device: str = "/device:CPU:0",
                 enable_dataset_iterators: bool = True,
                 enable_keras_extensions: bool = True) -> None:
        ordinal = _device_ordinal(ipu_device)
        device = ipu_devices.replica_device(ordinal)
        system = configured_system.get_configured_system()
        devices = system.devices if system is not None and ordinal == 0 else (device,)
        if len(devices) > 1 and not system.missing_devices:
            from popdist_launcher.ipu._replicated import ReplicatedIPUExtended
            distribute_lib.Strategy.__init__(self, ReplicatedIPUExtended(self, devices))
            log.info("IPUStrategy: %d local replicas on %s (gradients summed over them, as "
                     "Graphcore's replicated IPUStrategy).", len(devices), ", ".join(devices))
        else:
            if system is not None and system.num_ipus > 1:
                log.info("IPUStrategy: IPUConfig selects %d IPUs; one replica on %s%s.",
                         system.num_ipus, device,
                         f" ({system.missing_devices})" if system.missing_devices else "")
            distribute_lib.Strategy.__init__(self, _OneIPUExtended(self, device))
        self._ipu_device = ipu_device
        self._cpu_device = cpu_device
        self._device_ordinal = ordinal
        jit_functions.install()
        if enable_keras_extensions:
            from popdist_launcher.ipu_runtime import keras_extensions
            keras_extensions.install()

    @property
    def _collective_key_base(self) -> int:
        # MirroredExtended reads it from its container while being built; unused here.
        return id(self)

    @property
    def num_replicas_in_sync(self) -> int:
        """1, as Graphcore's: replication is inside the device program (see the module)."""
        return 1

    @property
    def num_local_replicas(self) -> int:
        """The replicas this strategy runs: 1, or one per local IPU device IPUConfig made."""
        return len(self.extended.worker_devices)

    def run(self, fn, args=(), kwargs=None, options=None):
        """Run ``fn`` on every replica. With several replicas: replica 0's results for the
        program's own functions (as Graphcore's), every replica's (PerReplica) for Keras's,
        TensorFlow's and this package's (see the module)."""
        jit_functions.host_operation("IPUStrategy.run")
        result = super().run(fn, args=args, kwargs=kwargs, options=options)
        if self.num_local_replicas == 1 or _framework_function(fn):
            return result
        return tf.nest.map_structure(
            lambda v: v.values[0] if isinstance(v, values_lib.DistributedValues) else v, result)

    def reduce(self, reduce_op, value, axis=None):
        """Reduce ``value`` over the replicas: a value ``run`` returned for the program (replica
        0's, not per replica) stays as it is, reduced along ``axis`` if one is given, as
        Graphcore's IPUStrategy reduces it."""
        if self.num_local_replicas == 1 or any(
                isinstance(v, values_lib.DistributedValues) for v in tf.nest.flatten(value)):
            return super().reduce(reduce_op, value, axis=axis)
        if axis is None:
            return value
        if isinstance(reduce_op, str):
            reduce_op = reduce_op.upper()
        mean = tf.distribute.ReduceOp(reduce_op) == tf.distribute.ReduceOp.MEAN
        reduction = tf.reduce_mean if mean else tf.reduce_sum
        return tf.nest.map_structure(lambda v: reduction(v, axis=axis), value)

    def experimental_run_v2(self, fn, args=(), kwargs=None, options=None):
        """The TF 2.0/2.1 name of ``run``, still used by IPU-era code."""
        return self.run(fn, args=args, kwargs=kwargs, options=options)

    @property
    def supports_loss_scaling(self) -> bool:
        return True


IPUStrategy = IPUStrategyV1

# The packages whose functions get every replica's results from a replicated IPUStrategy's run.
_FRAMEWORKS = ("keras", "tf_keras", "tensorflow", "popdist_launcher")


def _framework_function(fn) -> bool:
    """Whether ``fn`` (a function, tf.function or partial) is Keras's, TensorFlow's or this
    package's own."""
    fn = getattr(fn, "python_function", fn)
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in _FRAMEWORKS


def replicas_of(strategy) -> int:
    """How many replicas ``ipu.cross_replica_ops`` reduce over in ``strategy``: every replica
    in sync, an IPUStrategy's local replicas, or as far as PopDistStrategy's reductions reach
    (the configured IPU system's replicas)."""
    if isinstance(strategy, IPUStrategyV1):
        return strategy.num_local_replicas
    reach = getattr(strategy.extended, "reduction_reach", None)
    return reach() if reach is not None else strategy.num_replicas_in_sync
