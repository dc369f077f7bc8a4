"""``ipu.utils``: seeds and variable placement helpers with Graphcore's names.

``reset_ipu_seed`` seeds TensorFlow's random ops (the IPU's random generators are what it seeds
on Graphcore's machines); ``move_variable_initialization_to_cpu`` places a TF1 graph's variable
initializers on the host CPU.
"""
from __future__ import annotations

import logging
from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu_runtime import configured_system
from popdist_launcher.ipu_runtime.configured_system import get_ipu_config, reset_ipu_configuration  # noqa: F401
from popdist_launcher.ipu.config import (DeviceConnectionType, ExecutionProfileType,  # noqa: F401
                                         IPUConfig, MergeRemoteBuffersBehaviour,
                                         SchedulingAlgorithm, SelectionOrder,
                                         StochasticRoundingBehaviour, configure_ipu_system,
                                         running_on_ipu_model)

log = logging.getLogger(__name__)


def reset_ipu_seed(seed: int, device: str = "/device:IPU:0", cpu_device: str = "cpu",
                   experimental_identical_replicas: bool = False) -> None:
    """Seed the random operations that run on the IPU devices: here TensorFlow's global seed
    (``tf.random.set_seed``; the default graph's seed in TF1 graph mode), so dropout and other
    stateful random ops repeat from run to run. Replicas share the seed, so
    ``experimental_identical_replicas`` holds either way; ``device`` and ``cpu_device`` are
    accepted for Graphcore's signature."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"reset_ipu_seed needs an int seed, got {seed!r}.")
    tf.random.set_seed(seed)


def move_variable_initialization_to_cpu(graph: Optional[tf.Graph] = None) -> None:
    """Place the initializers of the graph's global variables, and the ops they are computed
    from, on the host CPU, no longer colocated with their variable (ops that read a resource stay
    where they are). Distributed variables
    are left to their strategy. A no-op in eager mode (no variable collections)."""
    from popdist_launcher.ipu_runtime.tf_internal import values_lib

    graph = graph or tf.compat.v1.get_default_graph()
    pending = [v.initializer.inputs[1].op for v in graph.get_collection("variables")
               if not isinstance(v, values_lib.DistributedValues) and v.initializer is not None
               and len(v.initializer.inputs) > 1]
    seen = set()
    while pending:
        op = pending.pop()
        if op in seen or any(t.dtype == tf.resource for t in op.inputs):
            continue
        seen.add(op)
        op._set_device("/device:CPU:0")  # noqa: SLF001 (TensorFlow has no public setter)
        # Colocated with the variable: not any more (Graphcore's too).
        if "_class" in op.node_def.attr:
            op._clear_attr("_class")  # noqa: SLF001
        pending.extend(t.op for t in op.inputs)


def get_num_of_ipus_in_device(ipu_device: str = "/device:IPU:0", device: str = "cpu") -> int:
    """The number of IPUs the configured system selected (1 when nothing was configured)."""
    system = configured_system.get_configured_system()
    return system.num_ipus if system else 1


def use_synthetic_data_for(synthetic_data_category) -> bool:
    """Whether Poplar replaces the data of ``synthetic_data_category`` (infeeds, outfeeds,
    parameters, ...) with synthetic data: never here, the program's own data always flows."""
    return False
