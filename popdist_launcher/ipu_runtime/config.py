"""IPUConfig, its enums, and configure_ipu_system, mapped onto local compute devices (Graphcore's
``ipu.config``, which re-exports them).

An "IPU" here is a virtual device. ``configure_ipu_system`` validates the configuration as
Graphcore's does, then turns this instance's replicas into TensorFlow devices: one logical CPU
device per local replica on CPU, or one GPU per replica where there are enough GPUs. Every option
of Graphcore's option tree is accepted; those that only steer IPU hardware or the Poplar compiler
have no effect here, and setting one to a non-default value is logged once. The system it
configured is kept in ``configured_system``. Importing this module does not import TensorFlow;
configuring the system does.
"""
from __future__ import annotations

import copy
import difflib
import enum
import json
import logging
from typing import Any, Dict, Optional, Sequence, Union

from popdist_launcher.ipu_runtime import configured_system
# Graphcore's ipu.config also has these (the configured state lives in configured_system).
from popdist_launcher.ipu_runtime.configured_system import (  # noqa: F401
    ConfiguredSystem, get_ipu_config, reset_ipu_configuration)

# Logged under Graphcore's module name, which programs know (ipu.config re-exports this one).
log = logging.getLogger("popdist_launcher.ipu.config")


class SelectionOrder(enum.Enum):
    """How IPUs are mapped to shards (inert here: a replica is one local device)."""
    AUTO = 0
    ZIGZAG = 1
    SNAKE = 2
    HOOF = 3


class ExecutionProfileType(enum.Enum):
    """Kinds of IPU execution profile (inert here: there is no Poplar profiler)."""
    NO_PROFILE = 0
    DEVICE_PROFILE = 1
    IPU_PROFILE = 2
    TILE_PROFILE = 3


class DeviceConnectionType(enum.Enum):
    """When to attach to the IPUs (inert here: local devices are always attached)."""
    ALWAYS = 0
    ON_DEMAND = 1
    NEVER = 2
    PRE_COMPILE = 3


class MergeRemoteBuffersBehaviour(enum.Enum):
    """Whether remote buffers are merged (inert here: there is no remote memory)."""
    NO_MERGING = 0
    MERGE = 1
    IF_BENEFICIAL = 2


class SchedulingAlgorithm(enum.Enum):
    """The Poplar scheduler (inert here: TensorFlow schedules its own ops)."""
    CHOOSE_BEST = 0
    CLUSTERING = 1
    POST_ORDER = 2
    LOOK_AHEAD = 3
    SHORTEST_PATH = 4


class StochasticRoundingBehaviour(enum.Enum):
    """IPU stochastic rounding (inert here: CPUs and GPUs round to nearest)."""
    OFF = 0
    ON = 1
    REPLICA_IDENTICAL_ONLY = 2

    @staticmethod
    def from_bool(value) -> "StochasticRoundingBehaviour":
        """``ON`` for a true value, ``OFF`` for a false one (the SDK's older boolean option)."""
        return StochasticRoundingBehaviour.ON if value else StochasticRoundingBehaviour.OFF


# Options that change what happens here; every other option only steers IPU hardware or Poplar.
_EFFECTIVE = {"auto_select_ipus", "select_ipus",
              "experimental.multi_replica_distribution.process_index",
              "experimental.multi_replica_distribution.process_count"}
# Inert options this process has already logged (so each is logged once).
_logged_inert: set = set()


class _ConfigNode:
    """A group of options declared by a subclass's ``_OPTIONS`` (name -> default) and
    ``_GROUPS`` (name -> node class). Setting an unknown name is an AttributeError with a
    suggestion; enum-typed options only take their enum."""

    _OPTIONS: Dict[str, Any] = {}
    _GROUPS: Dict[str, type] = {}

    def __init__(self, _path: str = "") -> None:
        object.__setattr__(self, "_path", _path)
        for name, default in self._OPTIONS.items():
            object.__setattr__(self, name, copy.deepcopy(default))
        for name, group in self._GROUPS.items():
            object.__setattr__(self, name, group(f"{_path}{name}."))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._GROUPS:
            raise AttributeError(
                f"{self._path}{name!r} is a group of options; set its attributes instead.")
        if name not in self._OPTIONS:
            known = [*self._OPTIONS, *self._GROUPS]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}."
            where = type(self).__name__.lstrip("_") if not self._path else self._path.rstrip(".")
            raise AttributeError(f"{where} has no option {name!r}{hint}")
        default = self._OPTIONS[name]
        value = _check_type(f"{self._path}{name}", default, value)
        object.__setattr__(self, name, value)
        full = f"{self._path}{name}"
        if full not in _EFFECTIVE and value != default and full not in _logged_inert:
            _logged_inert.add(full)
            log.info("IPUConfig.%s = %r is an IPU hardware/Poplar option with no effect on this "
                     "machine; accepted and ignored.", full, value)

    def _inert_settings(self) -> Dict[str, Any]:
        out = {}
        for name, default in self._OPTIONS.items():
            full = f"{self._path}{name}"
            if full not in _EFFECTIVE and getattr(self, name) != default:
                out[full] = getattr(self, name)
        for name in self._GROUPS:
            out.update(getattr(self, name)._inert_settings())
        return out

    def to_dict(self) -> Dict[str, Any]:
        """Every option as a flat dict of dotted names to values (enums by name)."""
        out = {}
        for name in self._OPTIONS:
            value = getattr(self, name)
            out[f"{self._path}{name}"] = value.name if isinstance(value, enum.Enum) else value
        for name in self._GROUPS:
            out.update(getattr(self, name).to_dict())
        return out

    def from_dict(self, options: Dict[str, Any]) -> None:
        """Set options from a dict as ``to_dict`` returns it (dotted names)."""
        for dotted, value in options.items():
            node, name = self, dotted
            if self._path and dotted.startswith(self._path):
                name = dotted[len(self._path):]
            *groups, name = name.split(".")
            for group in groups:
                node = getattr(node, group)
            default = node._OPTIONS.get(name)
            if isinstance(default, enum.Enum) and isinstance(value, str):
                value = type(default)[value]
            setattr(node, name, value)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def from_json(self, text: str) -> None:
        self.from_dict(json.loads(text))

    def __repr__(self) -> str:
        return f"{type(self).__name__.lstrip('_')}({self.to_dict()})"


def _check_type(full: str, default: Any, value: Any) -> Any:
    """``value`` if it has the option's type (that of its default), else a TypeError."""
    if full in ("auto_select_ipus", "select_ipus"):
        ok = ((isinstance(value, int) and not isinstance(value, bool))
              or isinstance(value, (list, tuple)))
        expected = "int, list or tuple of ints"
    elif isinstance(default, enum.Enum):
        return _check_enum(full, default, value)
    elif isinstance(default, bool):
        ok, expected = isinstance(value, bool), "bool"
    elif isinstance(default, int):
        ok, expected = isinstance(value, int) and not isinstance(value, bool), "int"
    elif isinstance(default, float):
        ok, expected = isinstance(value, (int, float)) and not isinstance(value, bool), "float"
    else:
        ok, expected = isinstance(value, type(default)), type(default).__name__
    if not ok:
        raise TypeError(f"Trying to set {full} to {value!r}, but it must be of type {expected}.")
    return value


def _check_enum(full: str, default: Any, value: Any) -> Any:
    if isinstance(value, type(default)):
        return value
    if full == "floating_point_behaviour.esr" and isinstance(value, bool):
        return StochasticRoundingBehaviour.ON if value else StochasticRoundingBehaviour.OFF
    kind = type(default).__name__
    raise TypeError(f"IPUConfig.{full} must be an ipu.config.{kind} (e.g. {kind}."
                    f"{default.name}), got {value!r}.")


def _group(name: str, options: Dict[str, Any], groups: Optional[Dict[str, type]] = None) -> type:
    return type(name, (_ConfigNode,), {"_OPTIONS": options, "_GROUPS": groups or {}})


_PoplarOptions = {"poplar_options": {}}
_MultiReplicaDistribution = _group("_MultiReplicaDistribution",
                                   {"process_index": 0, "process_count": 0})
_Experimental = _group("_Experimental", {
    "always_rearrange_copies_on_the_host": False, "enable_remote_buffer_embedding": False,
    "enable_prng_stability": False}, {"multi_replica_distribution": _MultiReplicaDistribution})
_FloatingPointBehaviour = _group("_FloatingPointBehaviour", {
    "inv": False, "div0": False, "oflo": False, "esr": StochasticRoundingBehaviour.OFF,
    "nanoo": False, "set_all": False})
_IOTiles = _group("_IOTiles", {"num_io_tiles": 0, "place_ops_on_io_tiles": False,
                               "available_memory_proportion": 0.9})
_DeviceConnection = _group("_DeviceConnection", {"type": DeviceConnectionType.ALWAYS, "version": "",
                                                 "enable_remote_buffers": False})
_IPUModel = _group("_IPUModel", {"compile_ipu_code": True, "tiles_per_ipu": 0, "version": "ipu2"})
_Math = _group("_Math", {"fast": False, "dot_strength": True})
_Matmuls = _group("_Matmuls", {"clear_pass_type": False, **_PoplarOptions})
_Convolutions = _group("_Convolutions", dict(_PoplarOptions))
_Slices = _group("_Slices", dict(_PoplarOptions))
_Pooling = _group("_Pooling", dict(_PoplarOptions))
_NormsExperimental = _group("_NormsExperimental", {"distributed_batch_norm_replica_group_size": 1})
_Norms = _group("_Norms", {"use_stable_statistics": False}, {"experimental": _NormsExperimental})
_Optimizations = _group("_Optimizations", {
    "prefetch_data_streams": True, "combine_embedding_lookups": False, "combine_matmuls": False,
    "enable_graph_outlining": True, "merge_infeed_io_copies": True,
    "maximum_cross_replica_sum_buffer_size": 0, "maximum_reduce_scatter_buffer_size": 0,
    "maximum_inter_ipu_copies_buffer_size": 0, "maximum_send_recv_cluster_size": 0,
    "maximum_reduce_many_buffer_size": 0, "maximum_all_gather_buffer_size": 0,
    "minimum_remote_tensor_size": 128,
    "merge_remote_buffers": MergeRemoteBuffersBehaviour.IF_BENEFICIAL,
    "enable_gather_simplifier": True, "triangular_solve_expander_block_size": 0,
    "cholesky_block_size": 0, "enable_fast_math": False, "enable_dynamic_slice_replacement": True,
}, {"math": _Math})
_Scheduling = _group("_Scheduling", {"algorithm": SchedulingAlgorithm.CHOOSE_BEST,
                                     "maximum_scheduler_lookahead_depth": 5,
                                     "maximum_scheduler_search_space_size": 64})


class IPUConfig(_ConfigNode):
    """The IPU system configuration: Graphcore's full option tree (SDK 3.x), same names and
    defaults.

    ``auto_select_ipus`` / ``select_ipus`` choose the local replica devices and
    ``experimental.multi_replica_distribution`` the instances; the other options steer IPU
    hardware or the Poplar compiler, are accepted so ported code runs unchanged, and have no
    effect here (setting one to a non-default value is logged once).
    """

    _OPTIONS = {"auto_select_ipus": [], "select_ipus": [], "allow_recompute": False,
                "selection_order": SelectionOrder.AUTO, "serialization_output_folder": "",
                "compilation_poplar_options": {}, "gcl_poplar_options": {}}
    _GROUPS = {"convolutions": _Convolutions, "device_connection": _DeviceConnection,
               "slices": _Slices, "experimental": _Experimental,
               "floating_point_behaviour": _FloatingPointBehaviour, "io_tiles": _IOTiles,
               "ipu_model": _IPUModel, "matmuls": _Matmuls, "norms": _Norms,
               "optimizations": _Optimizations, "pooling": _Pooling, "scheduling": _Scheduling}

    def __init__(self) -> None:
        super().__init__("")

    def configure_ipu_system(self, device: str = "cpu") -> "ConfiguredSystem":
        """Validate and apply this configuration (Graphcore's ``config.configure_ipu_system()``)."""
        return configure_ipu_system(self, device=device)


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
    connection = config.device_connection
    if connection.type in (DeviceConnectionType.PRE_COMPILE, DeviceConnectionType.NEVER) and \
            not connection.version:
        raise ValueError("IPUConfig.device_connection.version must be set when "
                         "device_connection.type is DeviceConnectionType.NEVER or PRE_COMPILE "
                         "(e.g. 'ipu2').")
    auto = _count_ipus(config.auto_select_ipus, "auto_select_ipus")
    select = config.select_ipus
    if auto and select not in ([], (), None):
        raise ValueError("IPUConfig.auto_select_ipus and select_ipus are both set; set only one.")
    if select not in ([], (), None):
        selected = [select] if isinstance(select, int) else list(select)
        if not all(isinstance(s, int) and s >= 0 for s in selected):
            raise ValueError(
                f"IPUConfig.select_ipus must be device ids (ints >= 0), got {select!r}.")
        from popdist_launcher import runtime
        return sum(runtime.selected_ipus(device) for device in selected)
    return auto or 1


def configure_ipu_system(config: IPUConfig, device: str = "cpu",
                         reset_configuration: bool = True,
                         ipus_per_replica: Optional[int] = None,
                         implicit: bool = False) -> ConfiguredSystem:
    """Validate ``config`` and create one TensorFlow device per local replica.

    Local replicas = selected IPUs / IPUs per replica (from the launcher, default 1). On CPU they
    are logical CPU devices; with ``device="gpu"`` one GPU each, if there are enough. Must run
    before TensorFlow initialises its devices, as on an IPU system. ``reset_configuration`` is
    accepted for Graphcore's signature: a new configuration always replaces the previous one.
    ``implicit``: this layer configures the system for a program that has not (see
    ``ConfiguredSystem.implicit``).
    """
    from popdist_launcher import runtime

    num_ipus = validate(config)
    inert = config._inert_settings()
    if inert:
        log.info("IPUConfig options with no effect on this machine (IPU hardware/Poplar only): %s",
                 ", ".join(f"{k}={v!r}" for k, v in sorted(inert.items())))
    ipus_per_replica = ipus_per_replica or runtime.num_ipus_per_replica()
    if num_ipus % ipus_per_replica:
        raise ValueError(
            f"IPUConfig selects {num_ipus} IPU(s), not a multiple of {ipus_per_replica} IPU(s) per "
            f"replica; select a multiple (e.g. auto_select_ipus = replicas x ipus per replica).")
    mrd = config.experimental.multi_replica_distribution
    return configured_system.attach(num_ipus, ipus_per_replica, device, mrd.process_index,
                                     mrd.process_count, copy.deepcopy(config), implicit)


def running_on_ipu_model() -> bool:
    """False: this is neither an IPU nor Graphcore's IPU model."""
    return False


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
