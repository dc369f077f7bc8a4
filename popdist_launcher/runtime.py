"""The worker-side view of the launch: who this instance is, read once from the environment.

Outside ``poprun-lite`` every accessor describes a single instance running every replica.
Nothing here imports TensorFlow or Horovod.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Optional

from popdist_launcher import _contract as c


class LaunchEnvironmentError(ValueError):
    """The PopDist variables in the environment are malformed or inconsistent."""


@dataclasses.dataclass(frozen=True)
class RuntimeContext:
    """This instance's place in the job."""

    launched: bool
    num_instances: int
    instance_index: int
    local_instance_index: int
    num_total_replicas: int
    num_local_replicas: int
    replica_index_offset: int
    num_ipus_per_replica: int
    restart_count: int = 0

    @property
    def replica_indices(self) -> range:
        """Global indices of the replicas this instance runs."""
        return range(self.replica_index_offset, self.replica_index_offset + self.num_local_replicas)


SINGLE_INSTANCE = RuntimeContext(
    launched=False,
    num_instances=1,
    instance_index=0,
    local_instance_index=0,
    num_total_replicas=1,
    num_local_replicas=1,
    replica_index_offset=0,
    num_ipus_per_replica=1,
)


def _read_int(env: Mapping[str, str], name: str, minimum: int) -> int:
    raw = env[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise LaunchEnvironmentError(
            f"{name}={raw!r} is not an integer; it is set by poprun-lite, so unset it or start the "
            f"program through poprun-lite."
        ) from None
    if value < minimum:
        raise LaunchEnvironmentError(
            f"{name}={value} must be at least {minimum}; unset it or start the program through "
            f"poprun-lite."
        )
    return value


def context_from_environ(env: Optional[Mapping[str, str]] = None) -> RuntimeContext:
    """Parse and cross-check the PopDist variables; a single instance when none is set."""
    env = os.environ if env is None else env
    if c.NUM_TOTAL_REPLICAS not in env and c.NUM_INSTANCES not in env:
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env:
            return _context_from_slurm(env)
        return SINGLE_INSTANCE
    missing = [n for n in (c.NUM_TOTAL_REPLICAS, c.NUM_LOCAL_REPLICAS, c.REPLICA_INDEX_OFFSET)
               if n not in env]
    if missing:
        raise LaunchEnvironmentError(
            f"the PopDist environment is incomplete: {', '.join(missing)} not set; start the "
            f"program through poprun-lite, or unset every POPDIST_* variable to run one instance."
        )
    total = _read_int(env, c.NUM_TOTAL_REPLICAS, 1)
    local = _read_int(env, c.NUM_LOCAL_REPLICAS, 1)
    offset = _read_int(env, c.REPLICA_INDEX_OFFSET, 0)
    ipus = _read_int(env, c.NUM_IPUS_PER_REPLICA, 1) if c.NUM_IPUS_PER_REPLICA in env else 1
    num_instances = (_read_int(env, c.NUM_INSTANCES, 1) if c.NUM_INSTANCES in env
                     else total // local)
    index = _read_int(env, c.INSTANCE_INDEX, 0) if c.INSTANCE_INDEX in env else offset // local
    local_index = (_read_int(env, c.LOCAL_INSTANCE_INDEX, 0) if c.LOCAL_INSTANCE_INDEX in env
                   else index)
    restart = _read_int(env, c.RESTART_COUNT, 0) if c.RESTART_COUNT in env else 0
    if total != local * num_instances:
        raise LaunchEnvironmentError(
            f"{c.NUM_TOTAL_REPLICAS}={total} is not {c.NUM_LOCAL_REPLICAS}={local} x "
            f"{c.NUM_INSTANCES}={num_instances}; the variables come from different launches, so "
            f"start the program through one poprun-lite command."
        )
    if index >= num_instances:
        raise LaunchEnvironmentError(
            f"{c.INSTANCE_INDEX}={index} is out of range for {c.NUM_INSTANCES}={num_instances}; "
            f"expected 0..{num_instances - 1}."
        )
    if offset != index * local:
        raise LaunchEnvironmentError(
            f"{c.REPLICA_INDEX_OFFSET}={offset} does not match instance {index} with {local} local "
            f"replicas (expected {index * local}); start the program through one poprun-lite command."
        )
    return RuntimeContext(True, num_instances, index, local_index, total, local, offset, ipus,
                          restart)


def _context_from_slurm(env: Mapping[str, str]) -> RuntimeContext:
    """A task of ``srun`` started without poprun-lite: one replica per task, Slurm's numbering."""
    ntasks = _read_int(env, "SLURM_NTASKS", 1)
    index = _read_int(env, "SLURM_PROCID", 0)
    local_index = _read_int(env, "SLURM_LOCALID", 0) if "SLURM_LOCALID" in env else 0
    if index >= ntasks:
        raise LaunchEnvironmentError(
            f"SLURM_PROCID={index} is out of range for SLURM_NTASKS={ntasks}; run the program "
            f"as an srun task or through poprun-lite.")
    restart = _read_int(env, c.RESTART_COUNT, 0) if c.RESTART_COUNT in env else 0
    return RuntimeContext(True, ntasks, index, local_index, ntasks, 1, index, 1, restart)


_context: Optional[RuntimeContext] = None


def init(env: Optional[Mapping[str, str]] = None) -> RuntimeContext:
    """Read (or re-read) the launch environment; raises LaunchEnvironmentError when malformed."""
    global _context
    _context = context_from_environ(env)
    return _context


def context() -> RuntimeContext:
    """The current context, read from the environment on first use."""
    return _context if _context is not None else init()


def is_launched() -> bool:
    return context().launched


def num_instances() -> int:
    return context().num_instances


def instance_index() -> int:
    return context().instance_index


def local_instance_index() -> int:
    return context().local_instance_index


def num_total_replicas() -> int:
    return context().num_total_replicas


def num_local_replicas() -> int:
    return context().num_local_replicas


def replica_index_offset() -> int:
    return context().replica_index_offset


def num_ipus_per_replica() -> int:
    return context().num_ipus_per_replica


def restart_count() -> int:
    return context().restart_count
