"""The IPU system configured in this process: the virtual IPUs and the TensorFlow devices that
``ipu.config.configure_ipu_system`` set up for them, and the IPUConfig it applied."""
from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Callable, List, Optional

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ConfiguredSystem:
    """What configure_ipu_system set up: virtual IPUs, and the TF devices that host replicas."""

    num_ipus: int
    ipus_per_replica: int
    devices: tuple
    process_index: int
    process_count: int
    # Set when TensorFlow had started before configure_ipu_system, so only the devices above
    # (fewer than the replicas) exist: why the others are missing.
    missing_devices: Optional[str] = None
    # True when this layer configured the system because the program used an IPU before it
    # configured one (from the launcher's environment); the program's own configuration follows.
    implicit: bool = False

    @property
    def num_local_replicas(self) -> int:
        return len(self.devices)

    @property
    def multi_replica_distribution(self) -> bool:
        return self.process_count > 0

    @property
    def num_global_replicas(self) -> int:
        """Local replication x process count, as Graphcore defines it."""
        return self.num_local_replicas * max(1, self.process_count)


_configured: Optional[ConfiguredSystem] = None
_configured_config: Any = None  # the ipu.config.IPUConfig applied (a copy)
# Called with each system configured (the IPU layer rebuilds the TF1 programs it built before).
_listeners: List[Callable[[ConfiguredSystem], None]] = []


def add_listener(listener: Callable[[ConfiguredSystem], None]) -> None:
    """Call ``listener(system)`` each time a system is configured from now on (once per
    listener however often it is added)."""
    if listener not in _listeners:
        _listeners.append(listener)


def attach(num_ipus: int, ipus_per_replica: int, device: str, process_index: int,
           process_count: int, config: Any, implicit: bool = False) -> ConfiguredSystem:
    """Make one TensorFlow device per local replica (``num_ipus // ipus_per_replica``) and keep
    them, with the validated IPUConfig ``config`` (a copy the caller made), as this process's
    configured system; then tell the listeners. ``implicit``: see ``ConfiguredSystem``."""
    global _configured, _configured_config
    replicas = num_ipus // ipus_per_replica
    devices = _make_replica_devices(replicas, device)
    missing = None
    if len(devices) < replicas:
        # On an IPU system the IPUs exist whenever the program configures them; here they are
        # logical devices, which TensorFlow only creates before it first runs an op.
        missing = (f"TensorFlow's devices were already initialised with {len(devices)} CPU "
                   f"device(s) when IPUConfig selected {replicas} replica device(s); call "
                   f"configure_ipu_system() before running any TensorFlow operation (for "
                   f"example before building the dataset).")
        log.info("%s Only /device:IPU:0 .. /device:IPU:%d can be used.", missing, len(devices) - 1)
    _configured = ConfiguredSystem(num_ipus, ipus_per_replica, tuple(devices), process_index,
                                   process_count, missing, implicit)
    _configured_config = config
    log.debug("configured %d virtual IPU(s) as %s", num_ipus, devices)
    for listener in list(_listeners):
        listener(_configured)
    return _configured


def prepare_local_replicas(_module: Any = None) -> None:
    """Hook as an IPU program's TensorFlow imports (or as a program that imported TensorFlow
    turns out to be one): under a launch with several replicas per instance, make the local
    replicas' devices now, while TensorFlow can still make devices (as configure_ipu_system
    does). On an IPU system the IPUs exist whatever the program ran before
    ``configure_ipu_system``; so here the replicas get their devices even where the program
    builds its dataset (running TensorFlow operations) before configuring. A malformed launch
    environment is left for the program's first read of it to report."""
    from popdist_launcher import runtime

    try:
        replicas = runtime.context().num_local_replicas
    except runtime.LaunchEnvironmentError:
        return
    if replicas > 1:
        _make_replica_devices(replicas, "cpu")


def _make_replica_devices(replicas: int, device: str) -> List[str]:
    import tensorflow as tf

    kind = device.upper()
    if kind == "GPU":
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < replicas:
            raise ValueError(
                f"{replicas} local replica(s) need {replicas} GPU(s) but {len(gpus)} are visible; "
                f"use fewer replicas per instance or device='cpu'.")
        return [f"/device:GPU:{i}" for i in range(replicas)]
    if kind != "CPU":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}.")
    cpus = tf.config.list_physical_devices("CPU")
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    current = tf.config.get_logical_device_configuration(cpus[0])
    if replicas > 1 and (current is None or len(current) != replicas):
        try:
            tf.config.set_logical_device_configuration(cpus[0], wanted)
        except RuntimeError:
            have = len(tf.config.list_logical_devices("CPU"))
            if have < replicas:
                return [f"/device:CPU:{i}" for i in range(have)]
    return [f"/device:CPU:{i}" for i in range(replicas)]


def get_configured_system() -> Optional[ConfiguredSystem]:
    """The system configure_ipu_system set up in this process, or None."""
    return _configured


def get_ipu_config(session: Any = None) -> List[Any]:
    """The configurations applied in this process (Graphcore returns one per IPU device; here
    there is at most one). ``session`` is accepted for Graphcore's signature."""
    return [] if _configured_config is None else [copy.deepcopy(_configured_config)]


def reset_ipu_configuration() -> None:
    """Forget the configured system (the devices TensorFlow created stay)."""
    global _configured, _configured_config
    _configured = None
    _configured_config = None
