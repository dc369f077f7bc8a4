"""``ipu.ipu_strategy``: IPUStrategyV1 (and its alias IPUStrategy), the single-process strategy
of Graphcore's TF2 API.

As on an IPU system, the strategy has one replica in sync (``num_replicas_in_sync == 1``):
variables live on, and ``run`` executes on, the local device that stands for
``/device:IPU:N`` (a logical CPU device or a GPU, see ``ipu.config``). Under poprun-lite each instance runs it independently. Creating one installs
the Keras extensions (``model.set_gradient_accumulation_options`` ...), see ``keras_extensions``.
"""
from __future__ import annotations

import logging

import tensorflow as tf

from popdist_launcher.ipu import config as ipu_config

log = logging.getLogger(__name__)


def _device_ordinal(ipu_device: str) -> int:
    tail = ipu_device.rsplit(":", 1)[-1]
    if "IPU" not in ipu_device.upper() or not tail.isdigit():
        raise ValueError(f"ipu_device must look like '/device:IPU:0', got {ipu_device!r}.")
    return int(tail)


class IPUStrategyV1(tf.distribute.OneDeviceStrategy):
    """One replica on the local device standing for ``ipu_device``.

    ``enable_dataset_iterators`` is accepted for Graphcore's signature (datasets are always
    iterated on the host here); ``enable_keras_extensions`` adds the IPU Keras methods to Keras
    models (True by default, as in Graphcore's).
    """

    def __init__(self, ipu_device: str = "/device:IPU:0", cpu_device: str = "/device:CPU:0",
                 enable_dataset_iterators: bool = True, enable_keras_extensions: bool = True) -> None:
        ordinal = _device_ordinal(ipu_device)
        device = ipu_config.replica_device(ordinal)
        selected = ipu_config.get_configured_system().num_ipus
        if selected > 1:
            log.info("IPUStrategy: IPUConfig selects %d IPUs; the strategy runs one replica, "
                     "on %s (Keras fit refuses a model Graphcore would replicate; use "
                     "PopDistStrategy for replicas).", selected, ipu_device)
        super().__init__(device)
        self._ipu_device = ipu_device
        self._cpu_device = cpu_device
        self._device_ordinal = ordinal
        if enable_keras_extensions:
            from popdist_launcher.ipu import keras_extensions
            keras_extensions.install()

    def experimental_run_v2(self, fn, args=(), kwargs=None, options=None):
        """The TF 2.0/2.1 name of ``run``, still used by IPU-era code."""
        return self.run(fn, args=args, kwargs=kwargs, options=options)

    @property
    def supports_loss_scaling(self) -> bool:
        return True


IPUStrategy = IPUStrategyV1
