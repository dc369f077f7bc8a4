"""The worker-side view of the launch: who this instance is, read once from the environment.

The launcher that started the process is recognised from its variables, first match wins:
poprun-lite (POPDIST_*), a TF_CONFIG whose task is an evaluator or ps (not a training instance:
one instance), torchrun-style (RANK/WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_*), a PMI
launcher (PMI_RANK/SIZE: MPICH or Intel MPI hydra, srun --mpi=pmi2), horovodrun's Gloo mode
(HOROVOD_RANK/SIZE), a TF_CONFIG training task (Kubeflow TFJob, Ray Train), an srun task
(SLURM_PROCID). The order puts the launcher that usually runs inside another first (torchrun
under srun, mpirun in a Slurm allocation, Ray workers in a Slurm step). Foreign launchers run one
replica per instance. With none of them every accessor describes a single instance running every
replica. Horovod's own rank and size, and a training TF_CONFIG, must agree with the launcher
that wins (else LaunchEnvironmentError): the collectives and IPUMultiWorkerStrategy follow them.
Nothing here imports TensorFlow or Horovod.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Mapping, Optional, Tuple

from popdist_launcher.wire import contract as c
from popdist_launcher import tf_config

POPRUN_LITE = "poprun-lite"
MPIRUN = "mpirun"
PMI = "PMI"
TORCHRUN = "torchrun"
TF_CONFIG = "TF_CONFIG"
SRUN = "srun"
HOROVODRUN = "horovodrun"


class LaunchEnvironmentError(ValueError):
    """The launch variables in the environment are malformed or inconsistent."""


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
    launcher: str = POPRUN_LITE  # who started the process ("" for a plain single process)

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
    launcher="",
)


@dataclasses.dataclass(frozen=True)
class ForeignLaunch:
    """This process's place as a launcher other than poprun-lite tells it (one replica each)."""

    launcher: str  # MPIRUN, PMI, TORCHRUN, TF_CONFIG, SRUN or HOROVODRUN
    variables: str  # the variables it was read from, for messages
    rank: int
    size: int
    local_rank: int
    # The node (host) index of every instance, in instance order, when the launcher tells it.
    node_of_rank: Optional[Tuple[int, ...]] = None
    # Where instance 0 can serve Horovod's Gloo rendezvous, and how that was worked out.
    rendezvous: Optional[Tuple[str, int]] = None
    rendezvous_origin: str = ""
    # What every instance of the job knows about it and outsiders are unlikely to (see
    # collectives/_bootstrap.py): material for the rendezvous secret.
    job_key: str = ""
    restart_count: int = 0


def _read_int(env: Mapping[str, str], name: str, minimum: int, fix: str = "") -> int:
    raw = env[name]
    fix = fix or "it is set by poprun-lite, so unset it or start the program through poprun-lite"
    try:
        value = int(raw.strip())
    except ValueError:
        raise LaunchEnvironmentError(f"{name}={raw!r} is not an integer; {fix}.") from None
    if value < minimum:
        raise LaunchEnvironmentError(f"{name}={value} must be at least {minimum}; {fix}.")
    return value


def _restart_count(env: Mapping[str, str]) -> int:
    return _read_int(env, c.RESTART_COUNT, 0) if c.RESTART_COUNT in env else 0


def context_from_environ(env: Optional[Mapping[str, str]] = None) -> RuntimeContext:
    """Parse and cross-check the launch variables; a single instance when no launcher set any."""
    env = os.environ if env is None else env
    if c.NUM_TOTAL_REPLICAS in env or c.NUM_INSTANCES in env:
        ctx = _context_from_popdist(env)
        _check_horovod_agrees(env, ctx.num_instances, ctx.instance_index, "the POPDIST_* variables")
        return ctx
    config = tf_config_from_environ(env)
    if config is not None and config.task_type in (tf_config.EVALUATOR, tf_config.PS):
        return SINGLE_INSTANCE  # evaluates or serves variables: never joins the training instances
    foreign = foreign_launch(env, config)
    if foreign is None:
        return SINGLE_INSTANCE
    return RuntimeContext(True, foreign.size, foreign.rank, foreign.local_rank, foreign.size, 1,
                          foreign.rank, 1, foreign.restart_count, foreign.launcher)


def _context_from_popdist(env: Mapping[str, str]) -> RuntimeContext:
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
            f"replicas (expected {index * local}); start the program through one poprun-lite "
            f"command."
        )
    return RuntimeContext(True, num_instances, index, local_index, total, local, offset, ipus,
                          _restart_count(env))


def tf_config_from_environ(env: Mapping[str, str]) -> Optional[tf_config.TFConfig]:
    """This process's TF_CONFIG, None when unset or when it names no task."""
    try:
        config = tf_config.from_environ(env)
    except tf_config.TFConfigError as exc:
        raise LaunchEnvironmentError(str(exc)) from None
    return config if config is not None and config.task_type else None


def foreign_launch(env: Optional[Mapping[str, str]] = None,
                   config: Optional[tf_config.TFConfig] = None) -> Optional[ForeignLaunch]:
    """The place a launcher other than poprun-lite gave this process, or None (see the module
    docstring for the order). ``config`` is the parsed TF_CONFIG, read from ``env`` if omitted."""
    env = os.environ if env is None else env
    if config is None:
        config = tf_config_from_environ(env)
    found: Optional[ForeignLaunch] = None
    if "RANK" in env and "WORLD_SIZE" in env:
        found = _from_torchrun(env)
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        found = _from_open_mpi(env)
    elif "PMI_RANK" in env and "PMI_SIZE" in env:
        found = _from_pmi(env)
    elif "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env:
        found = _from_horovodrun(env)
    elif config is not None and config.task_type not in (tf_config.EVALUATOR, tf_config.PS):
        return _from_tf_config(config, env)
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env:
        return _from_slurm(env)
    if found is None:
        return None
    if found.launcher != HOROVODRUN:
        _check_horovod_agrees(env, found.size, found.rank, found.variables)
    if config is not None and config.num_workers > 1 and (
            (config.num_workers, config.worker_index) != (found.size, found.rank)):
        raise LaunchEnvironmentError(
            f"TF_CONFIG makes this process training task {config.worker_index} of "
            f"{config.num_workers} but {found.variables} make it instance {found.rank} of "
            f"{found.size}, so IPUMultiWorkerStrategy and the PopDist accessors would disagree; "
            f"unset TF_CONFIG or the other launcher's variables.")
    return found


def _check_horovod_agrees(env: Mapping[str, str], size: int, rank: int, source: str) -> None:
    """Horovod's own rank and size, when set, must be the ones the launch variables give."""
    if "HOROVOD_RANK" not in env or "HOROVOD_SIZE" not in env:
        return
    fix = "they must describe the same job as the launcher's variables"
    h_rank = _read_int(env, "HOROVOD_RANK", 0, fix)
    h_size = _read_int(env, "HOROVOD_SIZE", 1, fix)
    if (h_rank, h_size) != (rank, size):
        raise LaunchEnvironmentError(
            f"HOROVOD_RANK={h_rank} and HOROVOD_SIZE={h_size} disagree with {source} (instance "
            f"{rank} of {size}), so Horovod would join a different job than the PopDist accessors "
            f"describe; unset the HOROVOD_* variables or start the program with one launcher.")


def _rank_size(env: Mapping[str, str], rank_name: str, size_name: str, launcher: str,
               ) -> Tuple[int, int, str]:
    fix = f"it should be set by {launcher}; unset it or start the program through {launcher}"
    size = _read_int(env, size_name, 1, fix)
    rank = _read_int(env, rank_name, 0, fix)
    if rank >= size:
        raise LaunchEnvironmentError(
            f"{rank_name}={rank} is out of range for {size_name}={size}; expected 0..{size - 1} "
            f"({fix}).")
    return rank, size, fix


def _local_rank(env: Mapping[str, str], rank_name: str, size_name: Optional[str], fix: str,
                ) -> Tuple[int, Optional[int]]:
    """(local rank, local size or None) from the named variables (0 when the rank is unset)."""
    if rank_name not in env:
        return 0, None
    local = _read_int(env, rank_name, 0, fix)
    if size_name is None or size_name not in env:
        return local, None
    local_size = _read_int(env, size_name, 1, fix)
    if local >= local_size:
        raise LaunchEnvironmentError(
            f"{rank_name}={local} is out of range for {size_name}={local_size}; expected "
            f"0..{local_size - 1} ({fix}).")
    return local, local_size


def _job_key(env: Mapping[str, str], *names: str) -> str:
    return json.dumps({n: env.get(n, "") for n in names}, sort_keys=True)


def _from_horovodrun(env: Mapping[str, str]) -> ForeignLaunch:
    rank, size, fix = _rank_size(env, "HOROVOD_RANK", "HOROVOD_SIZE", "horovodrun")
    local, _ = _local_rank(env, "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", fix)
    return ForeignLaunch(HOROVODRUN, "HOROVOD_RANK/HOROVOD_SIZE", rank, size, local)


def _from_torchrun(env: Mapping[str, str]) -> ForeignLaunch:
    rank, size, fix = _rank_size(env, "RANK", "WORLD_SIZE", "torchrun")
    local, local_size = _local_rank(env, "LOCAL_RANK", "LOCAL_WORLD_SIZE", fix)
    nodes = None
    if local_size is not None and size % local_size == 0:
        # torchrun gives every node LOCAL_WORLD_SIZE workers and numbers them node by node.
        group = _read_int(env, "GROUP_RANK", 0, fix) if "GROUP_RANK" in env else rank // local_size
        if rank == group * local_size + local:
            nodes = tuple(r // local_size for r in range(size))
    rendezvous = None
    if env.get("MASTER_ADDR", "").strip() and "MASTER_PORT" in env:
        # torchrun's agent on MASTER_ADDR (where instance 0 runs) holds MASTER_PORT itself.
        port = _read_int(env, "MASTER_PORT", 1, fix)
        if port < 65535:
            rendezvous = (env["MASTER_ADDR"].strip(), port + 1)
    restart = (_read_int(env, "TORCHELASTIC_RESTART_COUNT", 0, fix)
               if "TORCHELASTIC_RESTART_COUNT" in env else _restart_count(env))
    return ForeignLaunch(
        TORCHRUN, "RANK/WORLD_SIZE", rank, size, local, nodes, rendezvous,
        "MASTER_ADDR and MASTER_PORT+1" if rendezvous else "",
        _job_key(env, "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_RESTART_COUNT"), restart)


def _from_open_mpi(env: Mapping[str, str]) -> ForeignLaunch:
    rank, size, fix = _rank_size(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun")
    local, _ = _local_rank(env, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", fix)
    return ForeignLaunch(MPIRUN, "OMPI_COMM_WORLD_RANK/SIZE", rank, size, local,
                         restart_count=_restart_count(env))


def _from_pmi(env: Mapping[str, str]) -> ForeignLaunch:
    rank, size, fix = _rank_size(env, "PMI_RANK", "PMI_SIZE", "the MPI launcher")
    if "MPI_LOCALRANKID" in env:  # MPICH and Intel MPI (hydra)
        local, _ = _local_rank(env, "MPI_LOCALRANKID", "MPI_LOCALNRANKS", fix)
    elif "PMI_LOCAL_RANK" in env:  # Cray PALS / HPE's PMI
        local, _ = _local_rank(env, "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", fix)
    elif env.get("SLURM_PROCID") == env["PMI_RANK"].strip():  # srun --mpi=pmi2
        local, _ = _local_rank(env, "SLURM_LOCALID", None, fix)
    else:
        local = 0
    return ForeignLaunch(PMI, "PMI_RANK/PMI_SIZE", rank, size, local,
                         job_key=_job_key(env, "PMI_JOBID", "PMI_SIZE", "SLURM_JOB_ID",
                                          "SLURM_STEP_ID"),
                         restart_count=_restart_count(env))


def _from_slurm(env: Mapping[str, str]) -> ForeignLaunch:
    """A task of ``srun`` started without poprun-lite: Slurm's numbering."""
    rank, size, fix = _rank_size(env, "SLURM_PROCID", "SLURM_NTASKS", "srun")
    local, _ = _local_rank(env, "SLURM_LOCALID", None, fix)
    return ForeignLaunch(SRUN, "SLURM_PROCID/SLURM_NTASKS", rank, size, local,
                         job_key=_job_key(env, "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS"),
                         restart_count=_restart_count(env))


def _from_tf_config(config: tf_config.TFConfig, env: Mapping[str, str]) -> ForeignLaunch:
    """A training task of a TF_CONFIG cluster: chief (or master) first, then the workers."""
    tasks: List[str] = [address for kind in (tf_config.CHIEF, tf_config.MASTER, tf_config.WORKER)
                        for address in config.cluster.get(kind, ())]
    hosts = [address.rpartition(":")[0] for address in tasks]
    node_index: Dict[str, int] = {}
    for host in hosts:
        node_index.setdefault(host, len(node_index))
    rank = config.worker_index
    local = hosts[:rank].count(hosts[rank])
    # Instance 0's host, on the first port after its TF_CONFIG port that no task of the cluster
    # uses on that host.
    used = {address for addresses in config.cluster.values() for address in addresses}
    first_host, _, first_port = tasks[0].rpartition(":")
    port = int(first_port) + 1
    while f"{first_host}:{port}" in used:
        port += 1
    rendezvous = (first_host, port) if port < 65536 else None
    return ForeignLaunch(
        TF_CONFIG, "TF_CONFIG", rank, len(tasks), local, tuple(node_index[h] for h in hosts),
        rendezvous, "the TF_CONFIG address of the chief (or worker 0), next free port",
        json.dumps(config.cluster, sort_keys=True), _restart_count(env))


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


# ---- Graphcore's device ids: in a partition of P IPUs (a power of two), ids 0 .. P-1 are the
# single IPUs, then come the P/2 devices of 2 IPUs, the P/4 of 4, ..., and one device of all P.
def _power_of_two(count: int) -> int:
    return 1 << max(0, count - 1).bit_length()


def device_id(group_ipus: int, group_index: int, partition_ipus: int) -> int:
    """The id of the ``group_index``-th device of ``group_ipus`` IPUs in a partition of
    ``partition_ipus`` IPUs, as Graphcore numbers them."""
    partition, offset, size = _power_of_two(partition_ipus), 0, 1
    while size < _power_of_two(group_ipus):
        offset += partition // size
        size *= 2
    return offset + group_index


def device_ipus(device: int, partition_ipus: int) -> int:
    """How many IPUs Graphcore's device ``device`` of a partition of ``partition_ipus`` IPUs
    has; ValueError for an id past the partition's last device."""
    partition, first, size = _power_of_two(partition_ipus), 0, 1
    while size <= partition:
        if device < first + partition // size:
            return size
        first += partition // size
        size *= 2
    raise ValueError(f"device id {device} is past the last device ({first - 1}) of a partition "
                     f"of {partition} IPUs.")


def instance_device_id(ipus_per_replica: Optional[int] = None) -> int:
    """The id of the device that holds this instance's replicas (PopDist's ``getDeviceId``): in
    the job's partition (all replicas' IPUs at the launch's IPUs per replica), the instance's
    group of local replicas x ``ipus_per_replica`` IPUs (default: the launch's)."""
    ctx = context()
    per_replica = ipus_per_replica or ctx.num_ipus_per_replica
    return device_id(ctx.num_local_replicas * per_replica, ctx.instance_index,
                     ctx.num_total_replicas * ctx.num_ipus_per_replica)


def selected_ipus(device: int) -> int:
    """How many IPUs ``IPUConfig.select_ipus = [device]`` selects: under a launch, the
    instance's own device (``instance_device_id``) holds its replicas' IPUs and any other id is
    sized as in the job's partition; outside a launch each id is one IPU."""
    ctx = context()
    if not ctx.launched:
        return 1
    if device == instance_device_id():
        return ctx.num_local_replicas * ctx.num_ipus_per_replica
    return device_ipus(device, ctx.num_total_replicas * ctx.num_ipus_per_replica)
