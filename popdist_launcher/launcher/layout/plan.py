"""The launch plan: command-line options turned into one frozen value, before anything starts.

Everything after the CLI (printing the topology, backends, supervision) works on a LaunchPlan,
never on raw flags. Building a plan spawns nothing, so it is testable on its own.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.wire import contract as c
from popdist_launcher import tf_config
from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.layout.executables import which
from popdist_launcher.wire import placement_text as placing
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire.rendezvous import horovod_ranks
from popdist_launcher.wire.protocol import UNSET_ENV

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"  # compiled on first use (re caches it): not at start-up


class PlanError(ValueError):
    """The options cannot make a valid launch; the message is one sentence for the user."""


class Host(NamedTuple):
    """A machine instances run on: the name the user gave and the address others reach it at."""

    name: str
    address: str
    iface: str = ""  # the network interface holding ``address`` on that host (Horovod's Gloo)
    local: bool = True  # the launcher's own host: started without ssh


class InstanceSpec(NamedTuple):
    """One instance: where it runs and which replicas, ranks and port it owns."""

    index: int
    host: Host
    local_index: int
    local_size: int
    cross_rank: int
    cross_size: int
    replica_offset: int
    num_local_replicas: int
    tf_port: int

    @property
    def tf_address(self) -> str:
        return f"{self.host.address}:{self.tf_port}"

    @property
    def replicas(self) -> range:
        return range(self.replica_offset, self.replica_offset + self.num_local_replicas)


class LaunchPlan(NamedTuple):
    """Everything needed to start the job, as plain data."""

    program: Tuple[str, ...]
    num_instances: int
    num_replicas: int
    ipus_per_replica: int
    instances: Tuple[InstanceSpec, ...]
    rendezvous_address: str
    rendezvous_port: int
    exported_env: Tuple[Tuple[str, str], ...] = ()
    start_timeout: float = 120.0
    grace_period: float = 10.0
    restart_count: int = 0
    controller: str = "gloo"  # Horovod's controller: "gloo" (our rendezvous) or "mpi" (mpirun)
    tuning: Tuple[Tuple[str, str], ...] = ()  # Horovod knobs the launcher sets (see horovod_tuning)
    job_id: str = ""
    rendezvous_secret: str = ""  # in every rendezvous request's path (see rendezvous.py)
    tf_config_mode: str = tf_config.AUTO  # --tf-config: auto, worker, chief, none (tf_config.MODES)
    evaluator: bool = False  # --evaluator: one more process, outside the training world
    evaluator_port: int = 0  # its TF_CONFIG port, on the launcher's host (rendezvous_address)
    placement: str = ""  # binding, thread budget, GPUs for each wrapper to apply (placement.py)

    @property
    def num_local_replicas(self) -> int:
        return self.num_replicas // self.num_instances

    @property
    def hosts(self) -> Tuple[Host, ...]:
        seen: Dict[Host, None] = {}
        for inst in self.instances:
            seen.setdefault(inst.host)
        return tuple(seen)

    def tf_config(self, index: int) -> Optional[str]:
        """Instance ``index``'s TF_CONFIG in the plan's mode; None with --tf-config none."""
        built = tf_config.for_instance([i.tf_address for i in self.instances], index,
                                       self.tf_config_mode)
        return None if built is None else built.to_json()

    def evaluator_env(self) -> Dict[str, str]:
        """The --evaluator process's variables: the instances' cluster with an "evaluator" task,
        the job's id and attempt, and ``-x``; no PopDist or Horovod variables (it is no
        instance of the training world)."""
        built = tf_config.for_evaluator([i.tf_address for i in self.instances],
                                        self.tf_config_mode,
                                        f"{self.rendezvous_address}:{self.evaluator_port}")
        env = {"TF_CONFIG": built.to_json(), c.RESTART_COUNT: str(self.restart_count),
               c.JOB_ID: self.job_id}
        env.update(self._tf_config_auto())
        env.update(self.exported_env)
        return env

    def _tf_config_auto(self) -> Dict[str, str]:
        """Under auto, the mark that lets the library show the cluster only to the code that asks
        for one; not for a TF_CONFIG the user exports (-x), which applies as it is."""
        if self.tf_config_mode != tf_config.AUTO or "TF_CONFIG" in dict(self.exported_env):
            return {}
        return {c.TF_CONFIG_AUTO: "1"}

    def instance_env(self, index: int) -> Dict[str, str]:
        """The variables instance ``index`` gets on top of the environment it inherits."""
        inst = self.instances[index]
        env = {
            c.NUM_TOTAL_REPLICAS: str(self.num_replicas),
            c.NUM_LOCAL_REPLICAS: str(inst.num_local_replicas),
            c.REPLICA_INDEX_OFFSET: str(inst.replica_offset),
            c.NUM_IPUS_PER_REPLICA: str(self.ipus_per_replica),
            c.LOCAL_INSTANCE_INDEX: str(inst.local_index),
            c.UNIFORM_REPLICAS: "1",
            c.NUM_INSTANCES: str(self.num_instances),
            c.INSTANCE_INDEX: str(inst.index),
            c.RESTART_COUNT: str(self.restart_count),
            c.JOB_ID: self.job_id,
            # What a plain hvd.init() needs without horovodrun: ranks and a Gloo rendezvous.
            "HOROVOD_RANK": str(inst.index),
            "HOROVOD_SIZE": str(self.num_instances),
            "HOROVOD_LOCAL_RANK": str(inst.local_index),
            "HOROVOD_LOCAL_SIZE": str(inst.local_size),
            "HOROVOD_CROSS_RANK": str(inst.cross_rank),
            "HOROVOD_CROSS_SIZE": str(inst.cross_size),
            "HOROVOD_HOSTNAME": inst.host.name,
            "HOROVOD_CONTROLLER": self.controller,
            "HOROVOD_CPU_OPERATIONS": self.controller,
        }
        iface = inst.host.iface or ("lo" if inst.host.address.startswith("127.") else "")
        if iface:
            env["HOROVOD_GLOO_IFACE"] = iface
        if self.controller == "gloo":
            env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = rendezvous.client_address(
                self.rendezvous_address, self.rendezvous_port, self.rendezvous_secret)
            env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = str(self.rendezvous_port)
            env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, int(self.start_timeout)))
        if self.tf_config_mode != "none":
            env["TF_CONFIG"] = self.tf_config(index)
            env.update(self._tf_config_auto())
        elif "TF_CONFIG" not in dict(self.exported_env):
            env[UNSET_ENV] = "TF_CONFIG"  # none means none, even where the launcher has one
        env.update(self.tuning)
        if self.placement:
            env[placing.PLACEMENT_ENV] = placing.for_instance(
                self.placement, inst.index, inst.local_index, inst.local_size,
                inst.num_local_replicas)
        exported = dict(self.exported_env)
        env[c.HOROVOD_VARIABLES] = ",".join(
            sorted(k for k in env if k.startswith("HOROVOD_") and k not in exported))
        env.update(exported)
        return env

    def horovod_slots(self) -> List[dict]:
        """The host allocation Horovod's rendezvous server needs to size its scopes."""
        return [
            {
                "hostname": inst.host.name,
                "rank": inst.index,
                "size": self.num_instances,
                "local_rank": inst.local_index,
                "local_size": inst.local_size,
                "cross_rank": inst.cross_rank,
                "cross_size": inst.cross_size,
            }
            for inst in self.instances
        ]


def resolve_program(program: str, args: Sequence[str]) -> Tuple[str, ...]:
    """The argv that runs PROGRAM: a ``.py`` file runs with this interpreter."""
    if program.endswith(".py"):
        if not os.path.isfile(program):
            raise PlanError(
                f"program {program!r} does not exist; give the path of the Python script to run "
                f"(relative to {os.getcwd()!r} or absolute)."
            )
        return (sys.executable, program, *args)
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise PlanError(
                f"program {program!r} is not an executable file; check the path or run it through "
                f"an interpreter (e.g. poprun-lite -np 2 python {program})."
            )
        return (program, *args)
    found = which(program)
    if found is None:
        raise PlanError(
            f"program {program!r} was not found on PATH; give a path to it, or a .py script."
        )
    return (found, *args)


def parse_exports(items: Sequence[str], environ: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """``-x NAME=VALUE`` sets a value; ``-x NAME`` passes the launcher's own value of NAME."""
    exported: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not re.match(ENV_NAME, name):
            raise PlanError(
                f"-x {item!r}: {name!r} is not a valid environment variable name; expected "
                f"NAME or NAME=VALUE with NAME made of letters, digits and underscores."
            )
        if not sep:
            if name not in environ:
                raise PlanError(
                    f"-x {name}: {name} is not set in poprun-lite's environment; export it first "
                    f"or give a value with -x {name}=VALUE."
                )
            value = environ[name]
        exported[name] = value
    return tuple(exported.items())


def distribute(num_instances: int, hosts: Sequence[Host],
               counts: Optional[Sequence[int]] = None) -> List[Host]:
    """Host of each instance: contiguous blocks, ``counts`` per host or spread evenly."""
    if counts is None:
        per_host, extra = divmod(num_instances, len(hosts))
        counts = [per_host + (1 if i < extra else 0) for i in range(len(hosts))]
    if sum(counts) != num_instances:
        raise PlanError(f"internal: {sum(counts)} instance slots laid out for {num_instances}.")
    layout: List[Host] = []
    for host, count in zip(hosts, counts):
        layout.extend([host] * count)
    return layout


def build_plan(
    program: Sequence[str],
    num_instances: int,
    tf_ports: Sequence[int],
    rendezvous: Tuple[str, int],
    num_replicas: Optional[int] = None,
    ipus_per_replica: int = 1,
    hosts: Sequence[Host] = (Host("localhost", "127.0.0.1"),),
    exported_env: Sequence[Tuple[str, str]] = (),
    start_timeout: float = 120.0,
    grace_period: float = 10.0,
    restart_count: int = 0,
    counts: Optional[Sequence[int]] = None,
    controller: str = "gloo",
    tuning: Sequence[Tuple[str, str]] = (),
    job_id: str = "",
    rendezvous_secret: str = "",
    tf_config_mode: str = tf_config.AUTO,
    evaluator: bool = False,
    evaluator_port: int = 0,
    placement: str = "",
) -> LaunchPlan:
    """Validate the numbers and lay instances and replicas out over the hosts."""
    check_counts(num_instances, num_replicas, ipus_per_replica)
    num_replicas = num_instances if num_replicas is None else num_replicas
    if len(tf_ports) != num_instances:
        raise PlanError(f"need {num_instances} TF ports, got {len(tf_ports)}.")
    local_replicas = num_replicas // num_instances
    layout = distribute(num_instances, hosts, counts)
    instances = tuple(
        InstanceSpec(index=index, host=host, local_index=local, local_size=local_size,
                     cross_rank=cross, cross_size=cross_size,
                     replica_offset=index * local_replicas, num_local_replicas=local_replicas,
                     tf_port=tf_ports[index])
        for index, (host, (local, local_size, cross, cross_size)) in enumerate(
            zip(layout, horovod_ranks(layout))))
    return LaunchPlan(
        program=tuple(program),
        num_instances=num_instances,
        num_replicas=num_replicas,
        ipus_per_replica=ipus_per_replica,
        instances=instances,
        rendezvous_address=rendezvous[0],
        rendezvous_port=rendezvous[1],
        exported_env=tuple(exported_env),
        start_timeout=start_timeout,
        grace_period=grace_period,
        restart_count=restart_count,
        controller=controller,
        tuning=tuple(tuning),
        job_id=job_id,
        rendezvous_secret=rendezvous_secret,
        tf_config_mode=tf_config_mode,
        evaluator=evaluator,
        evaluator_port=evaluator_port,
        placement=placement,
    )


# Horovod's knobs under its MPI controller (mpirun with mpi_yield_when_idle, see engines.py),
# from benchmarks/allreduce.py's sweep and training A/B runs on 2 cores: a 16 MiB fusion buffer
# made a ResNet-50 gradient step 1.3-1.5x faster than the 128 MiB default (2 and 4 instances);
# a 0.1 ms cycle cut the latency of one small allreduce from about 2 ms to 0.3-0.4 ms and did
# not slow training (with yielding ranks). Over Gloo neither knob measured outside noise, so
# nothing is set there.
MPI_TUNING = (("HOROVOD_FUSION_THRESHOLD", str(16 << 20)), ("HOROVOD_CYCLE_TIME", "0.1"))


def horovod_tuning(controller: str, environ: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """The knobs to set for ``controller``, less those the user's environment already sets
    (``-x`` overrides them too)."""
    if controller != "mpi":
        return ()
    return tuple((k, v) for k, v in MPI_TUNING if k not in environ)


MAX_INSTANCES = 65536  # -np's bound


def check_counts(num_instances: int, num_replicas: Optional[int], ipus_per_replica: int) -> None:
    """The instance/replica arithmetic of PopRun, with errors that say how to fix it."""
    if not 1 <= num_instances <= MAX_INSTANCES:
        bound = "at least 1" if num_instances < 1 else f"at most {MAX_INSTANCES}"
        raise PlanError(f"--num-instances must be {bound}, got {num_instances}; pass how many "
                        f"processes to start, e.g. -np 4.")
    if ipus_per_replica < 1:
        raise PlanError(f"--ipus-per-replica must be at least 1, got {ipus_per_replica}.")
    if num_replicas is None:
        return
    if num_replicas < 1:
        raise PlanError(f"--num-replicas must be at least 1, got {num_replicas}.")
    if num_replicas % num_instances:
        lower = max(num_instances, num_replicas - num_replicas % num_instances)
        raise PlanError(
            f"--num-replicas {num_replicas} is not divisible by --num-instances {num_instances}; "
            f"every instance runs the same number of replicas, so use a multiple of "
            f"{num_instances} (e.g. {lower} or {lower + num_instances})."
        )


def format_topology(plan: LaunchPlan, backend_name: str,
                    commands: Sequence[Tuple[str, Sequence[str]]], base_env_note: str = "") -> str:
    """The human-readable table ``--print-topology`` shows, with the exact commands (``commands``:
    who it starts, argv)."""
    import shlex

    rows = [("instance", "host", "local", "replicas", "TF_CONFIG address")]
    for inst in plan.instances:
        first, last = inst.replicas[0], inst.replicas[-1]
        reps = str(first) if first == last else f"{first}-{last}"
        rows.append((str(inst.index), inst.host.name, str(inst.local_index), reps, inst.tf_address))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    meeting = f", rendezvous at {plan.rendezvous_address}:{plan.rendezvous_port}" \
        if plan.controller == "gloo" else ""
    lines = [
        console.line(f"{plan.num_instances} instance(s), {plan.num_replicas} replica(s) "
                     f"({plan.num_local_replicas} per instance), {plan.ipus_per_replica} IPU(s) "
                     f"per replica, {len(plan.hosts)} host(s), backend {backend_name}; Horovod "
                     f"controller {plan.controller}{meeting}"),
        "",
        "hosts: " + ", ".join(
            f"{h.name} ({h.address}{', ' + h.iface if h.iface else ''}, "
            f"{sum(1 for i in plan.instances if i.host == h)} instance(s))" for h in plan.hosts),
        "",
    ]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    lines.append("")
    for who, argv in commands:
        lines.append(f"command of {who}: " + " ".join(shlex.quote(a) for a in argv))
    for inst in plan.instances:
        lines.append("")
        lines.append(f"environment of instance {inst.index}{base_env_note}:")
        for key, value in sorted(plan.instance_env(inst.index).items()):
            lines.append(f"  {key}={value}")
    if plan.evaluator:
        lines += ["", f"environment of the evaluator (--evaluator, forked on this host, outside "
                      f"the training world){base_env_note}:"]
        lines.extend(f"  {key}={value}" for key, value in sorted(plan.evaluator_env().items()))
    return "\n".join(lines)
