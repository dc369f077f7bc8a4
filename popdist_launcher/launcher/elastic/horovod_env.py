"""A Horovod worker's environment, as a pure function of the driver's START and the job: the
variables horovodrun sets for an elastic slot, PopDist's from the worker's rank, and -x."""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.wire import contract as c
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire import placement_text as placing
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire.protocol import UNSET_ENV

GLOO_TIMEOUT_S = 30   # HOROVOD_GLOO_TIMEOUT_SECONDS unless -x sets it: how long survivors wait
#                       in a collective for a peer that stopped answering


class JobEnv(NamedTuple):
    """What every worker's environment shares: the job's id, replicas per instance, IPUs per
    replica, the rendezvous (address, port, secret), --placement and -x."""

    job_id: str
    replicas_per_instance: int
    ipus_per_replica: int
    rendezvous: Tuple[str, int]
    secret: str
    placement: Optional[str] = None
    exported_env: Sequence[Tuple[str, str]] = ()


def worker_env(start: frames.Start, iface: Optional[str], job: JobEnv) -> Dict[str, str]:
    """The variables of the worker a START frame asks for, on top of what it inherits; ``iface``
    is its host's network interface for Gloo, when known."""
    per = job.replicas_per_instance
    rank, size = start.rank, start.size
    local_rank, local_size = start.local_rank, start.local_size
    address, port = job.rendezvous
    env = {
        c.NUM_TOTAL_REPLICAS: str(size * per), c.NUM_LOCAL_REPLICAS: str(per),
        c.REPLICA_INDEX_OFFSET: str(rank * per),
        c.NUM_IPUS_PER_REPLICA: str(job.ipus_per_replica),
        c.LOCAL_INSTANCE_INDEX: str(local_rank), c.UNIFORM_REPLICAS: "1",
        c.NUM_INSTANCES: str(size), c.INSTANCE_INDEX: str(rank),
        # resets before the worker's round (Horovod counts rounds from 1): 0 at the start, as in
        # a fixed job's first attempt
        c.RESTART_COUNT: str(start.round - 1), c.JOB_ID: job.job_id,
        "HOROVOD_HOSTNAME": start.hostname, "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(size), "HOROVOD_LOCAL_RANK": str(local_rank),
        "HOROVOD_LOCAL_SIZE": str(local_size),
        "HOROVOD_CROSS_RANK": str(start.cross_rank),
        "HOROVOD_CROSS_SIZE": str(start.cross_size),
        "HOROVOD_ELASTIC": "1", "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous.client_address(address, port, job.secret),
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_S),
    }
    if iface:
        env["HOROVOD_GLOO_IFACE"] = iface
    if "TF_CONFIG" not in dict(job.exported_env):
        env[UNSET_ENV] = "TF_CONFIG"  # no fixed cluster in an elastic job
    if job.placement:
        env[placing.PLACEMENT_ENV] = placing.for_instance(job.placement, rank, local_rank,
                                                          local_size, per)
    env.update(job.exported_env)
    return env
