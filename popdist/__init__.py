"""Graphcore's ``popdist`` API for programs run by poprun-lite (or as one plain process).

``import popdist`` costs nothing: the accessors read the launch environment that poprun-lite
gives every instance. A program started without poprun-lite, by Open MPI's mpirun, a PMI
launcher (MPICH/Intel MPI hydra, srun), torchrun-style RANK/WORLD_SIZE or a TF_CONFIG (Kubeflow
TFJob, Ray Train), gets its place from that launcher's variables, one replica per instance (see
``popdist_launcher.runtime``); with none of them, one instance with one replica. Only ``init()``
starts the cross-instance collectives, which loads TensorFlow and Horovod.
"""
from __future__ import annotations

import sys
import threading
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


def getDeviceId(ipusPerReplica: int = 0, ipus_per_replica: Optional[int] = None) -> int:  # noqa: N802,N803
    """The id of the device this instance runs its replicas on: as on Graphcore's systems, the
    multi-IPU device of its local replicas x ``ipusPerReplica`` IPUs (default: the launch's
    ``--ipus-per-replica``) in the job's partition, numbered as Graphcore numbers devices (single
    IPUs first, then pairs, fours, ...): with one IPU per instance, the instance's index.
    ``IPUConfig.select_ipus = [getDeviceId()]`` selects this instance's replicas.
    ``ipus_per_replica`` is the same as ``ipusPerReplica``."""
    return runtime.instance_device_id(ipus_per_replica or ipusPerReplica or None)


def execute_on_instances(instances: Collection[int], function: Callable[..., Any],
                         *args: Any, **kwargs: Any) -> Any:
    """Call ``function(*args, **kwargs)`` on the instances whose index is in ``instances``
    (e.g. ``{0}`` to save a checkpoint once); return its result there, None elsewhere.

    As Graphcore's, ``synchronize()`` inside ``function`` is a barrier among those instances
    only. Call it on every instance, as PopDist's documentation does: for 2 or more instances
    that are not all of them, the first call with a given set registers that group with the
    host collectives on every instance (PopDist's ``registerCommunicator`` is likewise a
    collective of all instances); with one instance or all of them nothing is registered.
    """
    members = frozenset(int(i) for i in instances)
    count = runtime.num_instances()
    bad = sorted(i for i in members if not 0 <= i < count)
    if bad:
        raise ValueError(f"execute_on_instances: instance(s) {bad} do not exist; this job has "
                         f"instances 0 .. {count - 1}.")
    outer = getattr(_participants, "members", None)
    if outer is None and 2 <= len(members) < count:
        _start_collectives()
        from popdist_launcher import collectives
        collectives.register_group(members)
    if runtime.instance_index() not in members:
        return None
    _participants.members = members
    try:
        return function(*args, **kwargs)
    finally:
        _participants.members = outer


_participants = threading.local()  # the instances of the innermost execute_on_instances


def _start_collectives() -> None:
    from popdist_launcher import collectives
    if not collectives.is_initialized():
        init()


def synchronize() -> None:
    """A barrier across every instance of the job (inside ``execute_on_instances``, across its
    instances): returns on each instance once all have called it.

    The wait is bounded by the collectives' stall timeout ($POPRUN_COLLECTIVES_STALL_TIMEOUT,
    default 300 s): when an instance never arrives, the waiting ones fail with the stall error
    that names ``popdist.synchronize`` and the launcher ends the job. Starts the host collectives
    (``init``) when the program has not; a no-op for a single instance.
    """
    members = getattr(_participants, "members", None)
    count = runtime.num_instances()
    if count <= 1 or (members is not None and len(members) == 1):
        return  # only this instance takes part
    _start_collectives()
    from popdist_launcher import collectives
    if members is None or len(members) == count:
        collectives.barrier(name="popdist.synchronize")
        return
    if not collectives.has_group(members):
        raise ValueError(
            f"popdist.synchronize() among instances {sorted(members)} needs that group "
            f"registered on every instance, which a nested execute_on_instances does not do; "
            f"call popdist.execute_on_instances({sorted(members)}, ...) on every instance "
            f"instead.")
    collectives.barrier(name="popdist.synchronize", members=members)


def checkNumIpusPerReplica(ipus_per_replica: int) -> bool:  # noqa: N802
    """Whether ``ipus_per_replica`` is the launch's IPUs per replica (poprun-lite
    --ipus-per-replica; 1 for a plain process), as Graphcore's check."""
    return runtime.num_ipus_per_replica() == int(ipus_per_replica)


def initializeBackend() -> None:  # noqa: N802
    """Start the host collectives between instances (Horovod here; Graphcore's default backend
    is MPI). ``init()`` does this too."""
    runtime.init()
    from popdist_launcher import collectives
    collectives.init()


def isBackendInitialized() -> bool:  # noqa: N802
    """True once ``init()`` / ``initializeBackend()`` started the host collectives (and until
    ``finalizeBackend()``); reading it loads nothing."""
    state = sys.modules.get("popdist_launcher.collectives._state")
    return state is not None and state.is_initialized()


def finalizeBackend() -> None:  # noqa: N802
    """Stop the host collectives (a no-op when they are not running). Call it on every instance,
    after the last collective: the strategies and ``synchronize`` need them."""
    if isBackendInitialized():
        from popdist_launcher import collectives
        collectives.shutdown()


def registerDefaultBackend() -> None:  # noqa: N802
    """Accepted: the default backend here is Horovod's host collectives (``initializeBackend``
    starts them)."""


__all__ = [
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "finalizeBackend",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "initializeBackend",
    "isBackendInitialized",
    "isPopdistEnvSet",
    "registerDefaultBackend",
    "synchronize",
]
