"""``ipu.config``: IPUConfig and configure_ipu_system, mapped onto local compute devices.

An "IPU" here is a virtual device. ``configure_ipu_system`` validates the configuration as
Graphcore's does, then turns this instance's replicas into TensorFlow devices: one logical CPU
device per local replica on CPU, or one GPU per replica where there are enough GPUs. Importing this
module does not import TensorFlow; configuring the system does.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
from typing import Any, Dict, List, Optional, Sequence, Union

log = logging.getLogger(__name__)


class _ConfigNode:
    """A group of options. Setting an attribute that does not exist is an error (typos fail)."""

    _frozen = False

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen and not hasattr(self, name):
            known = [k for k in vars(self) if not k.startswith("_")]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}."
            raise AttributeError(f"{type(self).__name__.lstrip('_')} has no option {name!r}{hint}")
        if self._frozen and isinstance(getattr(self, name), _ConfigNode):
            raise AttributeError(f"{name!r} is a group of options; set its attributes instead.")
        object.__setattr__(self, name, value)

    def _as_dict(self) -> Dict[str, Any]:
        out = {}
        for key, value in vars(self).items():
            if key.startswith("_"):
                continue
            out[key] = value._as_dict() if isinstance(value, _ConfigNode) else value
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__.lstrip('_')}({self._as_dict()})"


def _node(**options: Any) -> _ConfigNode:
    node = _ConfigNode()
    for key, value in options.items():
        setattr(node, key, value)
    node._freeze()
    return node


class _MultiReplicaDistribution(_ConfigNode):
    def __init__(self) -> None:
        self.process_index = 0
        self.process_count = 0  # 0: multi-replica distribution is off
        self._freeze()


class _Experimental(_ConfigNode):
    def __init__(self) -> None:
        self.multi_replica_distribution = _MultiReplicaDistribution()
        self.always_rearrange_copies_on_the_host = False
        self.enable_remote_buffer_embedding = False
        self.enable_prng_stability = False
        self._freeze()


class IPUConfig(_ConfigNode):
    """The IPU system configuration, with the option names of Graphcore's ``ipu.config``.

    Options that only matter on IPU hardware (floating-point behaviour, Poplar options, scheduling)
    are accepted so ported code runs unchanged, and have no effect here.
    """

    def __init__(self) -> None:
        self.auto_select_ipus: Union[int, List[int], tuple] = []
        self.select_ipus: Union[int, List[int], tuple] = []
        self.experimental = _Experimental()
        self.allow_recompute = False
        self.selection_order = None
        self.compilation_poplar_options: Dict[str, str] = {}
        self.device_connection = _node(type=None, version="", enable_remote_buffers=False)
        self.floating_point_behaviour = _node(inv=False, div0=False, oflo=False, esr=False,
                                              nanoo=False, set_fp_exceptions=None)
        self.optimizations = _node(math=_node(fast=False), prefetch_data_streams=True,
                                   combine_embedding_lookups=False, combine_matmuls=False,
                                   maximum_cross_replica_sum_buffer_size=0,
                                   enable_graph_outlining=True, merge_infeed_io_copies=True)
        self.scheduling = _node(algorithm=None, maximum_scheduler_lookahead_depth=5,
                                maximum_scheduler_search_space_size=64)
        self.matmuls = _node(poplar_options={}, clear_pass_type=False)
        self.convolutions = _node(poplar_options={})
        self.slices = _node(poplar_options={})
        self.norms = _node(use_stable_statistics=False, experimental=_node(distributed_batch_norm_replica_group_size=1))
        self.ipu_model = _node(compile_ipu_code=True, tiles_per_ipu=0, version="ipu2")
        self.io_tiles = _node(num_io_tiles=0, place_ops_on_io_tiles=False,
                              available_memory_proportion=0.9)
        self.device_connection_type = None
        self._freeze()

    def configure_ipu_system(self, device: str = "cpu") -> "ConfiguredSystem":
        """Validate and apply this configuration (Graphcore's ``config.configure_ipu_system()``)."""
        return configure_ipu_system(self, device=device)


@dataclasses.dataclass(frozen=True)
class ConfiguredSystem:
    """What configure_ipu_system set up: virtual IPUs, and the TF devices that host replicas."""

    num_ipus: int
    ipus_per_replica: int
    devices: tuple
    process_index: int
    process_count: int

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


def _count_ipus(value: Union[int, Sequence[int]], name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"IPUConfig.{name} must be an int or a list of ints, got {value!r}.")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"IPUConfig.{name} must be non-negative, got {value}.")
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and v > 0 for v in value):
        return sum(value)
    raise ValueError(f"IPUConfig.{name} must be an int or a list of positive ints, got {value!r}.")


def validate(config: IPUConfig) -> int:
    """The number of virtual IPUs the configuration selects; ValueError when inconsistent."""
    if not isinstance(config, IPUConfig):
        raise TypeError(f"expected an ipu.config.IPUConfig, got {type(config).__name__}.")
    mrd = config.experimental.multi_replica_distribution
    for name in ("process_index", "process_count"):
        value = getattr(mrd, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"IPUConfig.experimental.multi_replica_distribution.{name} must be a "
                f"non-negative int, got {value!r}.")
    if mrd.process_count and not 0 <= mrd.process_index < mrd.process_count:
        raise ValueError(
            f"IPUConfig.experimental.multi_replica_distribution.process_index must be in the "
            f"range [0, process_count) = [0, {mrd.process_count}), got {mrd.process_index}.")
    auto = _count_ipus(config.auto_select_ipus, "auto_select_ipus")
    select = config.select_ipus
    if auto and select not in ([], (), None):
        raise ValueError("IPUConfig.auto_select_ipus and select_ipus are both set; set only one.")
    if select not in ([], (), None):
        selected = [select] if isinstance(select, int) else list(select)
        if not all(isinstance(s, int) and s >= 0 for s in selected):
            raise ValueError(f"IPUConfig.select_ipus must be device ids (ints >= 0), got {select!r}.")
        return len(selected)
    return auto or 1


def configure_ipu_system(config: IPUConfig, device: str = "cpu",
                         ipus_per_replica: Optional[int] = None) -> ConfiguredSystem:
    """Validate ``config`` and create one TensorFlow device per local replica.

    Local replicas = selected IPUs / IPUs per replica (from the launcher, default 1). On CPU they
    are logical CPU devices; with ``device="gpu"`` one GPU each, if there are enough. Must run
    before TensorFlow initialises its devices, as on an IPU system.
    """
    global _configured
    from popdist_launcher import runtime

    num_ipus = validate(config)
    ipus_per_replica = ipus_per_replica or runtime.num_ipus_per_replica()
    if num_ipus % ipus_per_replica:
        raise ValueError(
            f"IPUConfig selects {num_ipus} IPU(s), not a multiple of {ipus_per_replica} IPU(s) per "
            f"replica; select a multiple (e.g. auto_select_ipus = replicas x ipus per replica).")
    replicas = num_ipus // ipus_per_replica
    devices = _make_replica_devices(replicas, device)
    mrd = config.experimental.multi_replica_distribution
    _configured = ConfiguredSystem(num_ipus, ipus_per_replica, tuple(devices), mrd.process_index,
                                   mrd.process_count)
    log.debug("configured %d virtual IPU(s) as %s", num_ipus, devices)
    return _configured


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
                raise RuntimeError(
                    f"TensorFlow's devices are already initialised with {have} CPU device(s), so "
                    f"{replicas} replicas cannot be created; call configure_ipu_system() before "
                    f"running any TensorFlow operation.") from None
    return [f"/device:CPU:{i}" for i in range(replicas)]


def local_replica_devices() -> tuple:
    """This instance's replica devices: as configure_ipu_system set them up, or, when it was not
    called, configured now from the launcher's environment (one device per local replica)."""
    system = _configured
    if system is None:
        config = IPUConfig()
        set_ipu_config(config, configure_device=True)
        system = configure_ipu_system(config)
    return system.devices


def get_configured_system() -> Optional[ConfiguredSystem]:
    """The system configure_ipu_system set up in this process, or None."""
    return _configured


def reset_ipu_configuration() -> None:
    """Forget the configured system (the devices TensorFlow created stay)."""
    global _configured
    _configured = None


def set_ipu_config(config: IPUConfig, ipus_per_replica: Optional[int] = None,
                   configure_device: bool = True) -> IPUConfig:
    """Fill the multi-replica distribution options (and device selection) from the launcher.

    As ``popdist.tensorflow.set_ipu_config``: process_count/index from the instance count and
    index; with ``configure_device``, select this instance's replicas x ipus_per_replica IPUs.
    """
    from popdist_launcher import runtime

    ctx = runtime.context()
    ipus_per_replica = ipus_per_replica or ctx.num_ipus_per_replica
    mrd = config.experimental.multi_replica_distribution
    mrd.process_count = ctx.num_instances
    mrd.process_index = ctx.instance_index
    if configure_device:
        config.select_ipus = []
        config.auto_select_ipus = ctx.num_local_replicas * ipus_per_replica
    return config
