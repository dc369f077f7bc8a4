"""The local devices that stand for IPUs: ``/device:IPU:N`` in any graph (``tf.device``/
``ops.device``, TF1 graphs and tf.functions) is the local device standing for IPU N, as
``ipu.scopes.ipu_scope`` places it, and ``replica_device`` / ``local_replica_devices`` name them.

Graphcore's programs may name the IPU directly (``with ops.device("/device:IPU:0"):
ipu_compiler.compile(...)``). ``watch`` (the site hook calls it when the IPU layer imports)
installs the mapping once TensorFlow has imported too; programs that never import the IPU layer
keep stock placement.
"""
from __future__ import annotations

import functools
import re

from popdist_launcher.ipu import _configured_system, config

_IPU = re.compile(r"/device:IPU:(\d+)", re.IGNORECASE)


def local_device(device: str) -> str:
    """``device`` with its IPU part replaced by the local device standing for that IPU; any
    other device string unchanged. Before the program configured its IPU system, IPU N is
    CPU N (configure_ipu_system creates them; a later configuration decides nothing here)."""
    found = _IPU.search(device)
    if found is None:
        return device
    ordinal = int(found.group(1))
    system = _configured_system.get_configured_system()
    if system is not None and ordinal < len(system.devices):
        local = system.devices[ordinal]
    else:
        local = f"/device:CPU:{ordinal}"
    return device[:found.start()] + local + device[found.end():]


def local_replica_devices() -> tuple:
    """This instance's replica devices: as configure_ipu_system set them up, or, when it was not
    called, configured now from the launcher's environment (one device per local replica)."""
    system = _system()
    if system.missing_devices:
        raise RuntimeError(system.missing_devices)
    return system.devices


def replica_device(ordinal: int) -> str:
    """The TensorFlow device standing for ``/device:IPU:<ordinal>``."""
    system = _system()
    if ordinal < len(system.devices):
        return system.devices[ordinal]
    if system.missing_devices:
        raise RuntimeError(system.missing_devices)
    raise ValueError(f"/device:IPU:{ordinal} does not exist: this instance has "
                     f"{len(system.devices)} IPU device(s), /device:IPU:0 .. "
                     f"/device:IPU:{len(system.devices) - 1}; select more with "
                     f"IPUConfig.auto_select_ipus.")


def _system() -> _configured_system.ConfiguredSystem:
    """The configured system; configured now from the launcher's environment if needed."""
    system = _configured_system.get_configured_system()
    if system is None:
        ipu_config = config.IPUConfig()
        config.set_ipu_config(ipu_config, configure_device=True)
        return config.configure_ipu_system(ipu_config)
    return system


def watch(config_module=None) -> None:
    """Install the mapping once TensorFlow's graph module has imported (the site hook calls this
    when the IPU layer imports; standard library only until then)."""
    from popdist_launcher._startup import after_import
    after_import("tensorflow.python.framework.ops", "popdist_launcher.ipu._ipu_devices:install")


def install(ops_module=None) -> None:
    """Map IPU devices in every op TensorFlow places from now on (once per process)."""
    from tensorflow.python.framework import ops

    original = ops.Graph._apply_device_functions  # noqa: SLF001 (no public hook for placement)
    if getattr(original, "_ipu_devices", False):
        return

    @functools.wraps(original)
    def apply_device_functions(graph, op):
        original(graph, op)
        if "IPU" in op.device or "ipu" in op.device:
            op._set_device_from_string(local_device(op.device))  # noqa: SLF001

    apply_device_functions._ipu_devices = True
    ops.Graph._apply_device_functions = apply_device_functions  # noqa: SLF001
