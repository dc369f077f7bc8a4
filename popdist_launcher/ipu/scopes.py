"""``ipu.scopes``: ``ipu_scope('/device:IPU:0')`` places ops on the local compute device."""
from __future__ import annotations

import contextlib

import tensorflow as tf


@contextlib.contextmanager
def ipu_scope(device: str = "/device:IPU:0"):
    """The IPU device N is this instance's replica device N (a CPU or GPU)."""
    from popdist_launcher.ipu.config import local_replica_devices

    index = int(device.rsplit(":", 1)[-1]) if device.rsplit(":", 1)[-1].isdigit() else 0
    devices = local_replica_devices()
    if index >= len(devices):
        raise ValueError(f"{device} does not exist: this instance has {len(devices)} replica "
                         f"device(s), /device:IPU:0 .. /device:IPU:{len(devices) - 1}.")
    with tf.device(devices[index]):
        yield
