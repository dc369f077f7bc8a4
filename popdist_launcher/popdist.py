"""Graphcore's ``popdist`` spellings of the runtime accessors, so ported code keeps its calls."""
from __future__ import annotations

from popdist_launcher import runtime


def isPopdistEnvSet() -> bool:  # noqa: N802 (popdist's names)
    return runtime.is_launched()


def getNumInstances() -> int:  # noqa: N802
    return runtime.num_instances()


def getInstanceIndex() -> int:  # noqa: N802
    return runtime.instance_index()


def getNumTotalReplicas() -> int:  # noqa: N802
    return runtime.num_total_replicas()


def getNumLocalReplicas() -> int:  # noqa: N802
    return runtime.num_local_replicas()


def getReplicaIndexOffset() -> int:  # noqa: N802
    return runtime.replica_index_offset()


def getNumIpusPerReplica() -> int:  # noqa: N802
    return runtime.num_ipus_per_replica()


def getLocalInstanceIndex() -> int:  # noqa: N802
    return runtime.local_instance_index()


def init() -> None:
    """Read the launch environment (popdist.init()); raises on malformed variables."""
    runtime.init()
