"""Graphcore's ``popdist`` API for programs run by poprun-lite (or as one plain process).

``import popdist`` costs nothing: the accessors read the launch environment that poprun-lite
gives every instance. A program started without poprun-lite, by Open MPI's mpirun, a PMI
launcher (MPICH/Intel MPI hydra, srun), torchrun-style RANK/WORLD_SIZE or a TF_CONFIG (Kubeflow
TFJob, Ray Train), gets its place from that launcher's variables, one replica per instance (see
``popdist_launcher.runtime``); with none of them, one instance with one replica. Only ``init()``
starts the cross-instance collectives, which loads TensorFlow and Horovod.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Optional

from popdist_launcher import runtime


def init() -> None:
    """Read the launch environment and start the host collectives between instances.

    As Graphcore's: call it once, before the strategies or the IPU configuration need it (they
    also start the collectives themselves). Raises on malformed launch variables.
    """
    runtime.init()
    from popdist_launcher import collectives

    collectives.init()


def isPopdistEnvSet() -> bool:  # noqa: N802 (popdist's names)
    """True when this process is an instance of a launched job: started by poprun-lite, or by
    mpirun, a PMI launcher, srun, torchrun or a TF_CONFIG training task (False for an evaluator)."""
    return runtime.is_launched()


def getNumInstances() -> int:  # noqa: N802
    """Number of instances of the job (1 for a plain process)."""
    return runtime.num_instances()


def getInstanceIndex() -> int:  # noqa: N802
    """This instance's index, 0 .. getNumInstances() - 1."""
    return runtime.instance_index()


def getNumTotalReplicas() -> int:  # noqa: N802
    """Replicas of the model across all instances."""
    return runtime.num_total_replicas()


def getNumLocalReplicas() -> int:  # noqa: N802
    """Replicas run by this instance."""
    return runtime.num_local_replicas()


def getReplicaIndexOffset() -> int:  # noqa: N802
    """Global index of this instance's first replica."""
    return runtime.replica_index_offset()


def getNumIpusPerReplica() -> int:  # noqa: N802
    """Devices per replica (poprun-lite --ipus-per-replica)."""
    return runtime.num_ipus_per_replica()


def getLocalInstanceIndex() -> int:  # noqa: N802
    """This instance's index among the instances on its host."""
    return runtime.local_instance_index()


def getDeviceId(ipus_per_replica: Optional[int] = None) -> int:  # noqa: N802
    """The id of the device this instance runs its replicas on.

    On Graphcore's systems, the multi-IPU device holding this instance's replicas; here the
    instance's replicas run on local devices of its own, so the id is the instance's index
    among the instances of its host (distinct per instance on a host, as on an IPU-POD).
    ``ipus_per_replica`` is accepted for compatibility and changes nothing.
    """
    del ipus_per_replica
    return runtime.local_instance_index()


def execute_on_instances(instances: Collection[int], function: Callable[..., Any],
                         *args: Any, **kwargs: Any) -> Any:
    """Call ``function(*args, **kwargs)`` on the instances whose index is in ``instances``
    (e.g. ``{0}`` to save a checkpoint once); return its result there, None elsewhere."""
    if runtime.instance_index() in set(instances):
        return function(*args, **kwargs)
    return None


__all__ = [
    "execute_on_instances",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
]
