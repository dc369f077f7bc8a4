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


def set_ipu_config(config, ipus_per_replica=None, configure_device=True):
    """Fill an IPUConfig's multi-replica distribution options from the launch environment."""
    from popdist_launcher.ipu.config import set_ipu_config as _set

    return _set(config, ipus_per_replica=ipus_per_replica, configure_device=configure_device)


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
    "set_ipu_config",
]
