"""popdist_launcher: run IPU-style distributed TensorFlow programs on ordinary CPUs and GPUs.

Importing the package is cheap: TensorFlow and Horovod are imported only by the submodules that
need them (strategies, collectives, ipu).
"""
from popdist_launcher.runtime import (
    LaunchEnvironmentError,
    RuntimeContext,
    context,
    init,
    instance_index,
    is_launched,
    local_instance_index,
    num_instances,
    num_ipus_per_replica,
    num_local_replicas,
    num_total_replicas,
    replica_index_offset,
    restart_count,
)

__version__ = "0.1.0"

__all__ = [
    "LaunchEnvironmentError",
    "RuntimeContext",
    "context",
    "init",
    "instance_index",
    "is_launched",
    "local_instance_index",
    "num_instances",
    "num_ipus_per_replica",
    "num_local_replicas",
    "num_total_replicas",
    "replica_index_offset",
    "restart_count",
]
