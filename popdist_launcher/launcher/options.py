"""The job's options as one validated, frozen value: what the command line asked for, with the
host layout it chose; ``build`` checks the command line's values into it and the agent takes it.
Each value is checked once, the hosts at start are read once (``hosts_at_start``) and the backend
is picked in one place (``backends.registry.pick_backend``, through ``topology.lay_out``). Nothing
here imports click: the command line (launch.py) is the one place that knows it."""
from __future__ import annotations

import os
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.wire import contract
from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout import topology
from popdist_launcher.launcher.layout.backends.base import HostOptions
from popdist_launcher.launcher.layout.backends.detect import in_slurm_allocation
from popdist_launcher.launcher.elastic import setup as elastic_setup
from popdist_launcher.launcher.elastic.setup import ElasticOptions
from popdist_launcher.launcher.supervision.hang import bounds as hang
from popdist_launcher.launcher.output.routing import OutputOptions
from popdist_launcher.launcher.layout.plan import (PlanError, check_counts, parse_exports,
                                                   resolve_program)
from popdist_launcher.launcher.layout.remote import SshOptions, agent_from_environ
from popdist_launcher.wire.placement_text import encode as encode_placement
from popdist_launcher.launcher.layout.topology import Layout, TopologyError

LOCALHOST = "localhost"
ELASTIC_HOSTS = "the elastic job's hosts"
DISCOVERY_SCRIPT = "the host discovery script"  # what named the hosts (errors say so)


class JobOptions(NamedTuple):
    """Everything the job's attempts need; checked by ``build`` before it is made."""

    layout: Layout  # the first attempt's
    argv: Tuple[str, ...]
    num_instances: int
    num_replicas: Optional[int]
    ipus_per_replica: int
    exported_env: Tuple[Tuple[str, str], ...]
    start_timeout: float
    grace_period: float
    port_range: Optional[Tuple[int, int]]
    max_restarts: int
    timeout: Optional[float]
    output: OutputOptions
    placement: str = ""  # POPRUN_PLACEMENT's options (placement.encode)
    tf_config_mode: str = "auto"  # --tf-config (tf_config.AUTO)
    evaluator: bool = False  # --evaluator
    elastic: Optional[ElasticOptions] = None  # --min-np, --max-np, --host-discovery-script
    hang_timeout: Optional[float] = None  # --hang-timeout: None the default bounds, 0 off
    hang_busy_timeout: Optional[float] = None  # --hang-busy-timeout: None the default
    host_options: HostOptions = HostOptions()  # what every layout is computed from

    @property
    def replicas_per_instance(self) -> int:
        """Replicas each instance holds: --num-replicas / -np (check_counts made it whole), 1
        by default. Every attempt and round of a job keeps it, whatever its instance count."""
        return (self.num_replicas or self.num_instances) // self.num_instances

    def layout_on(self, hosts: Sequence[Tuple[str, int]], num_instances: int) -> Layout:
        """An elastic job's layout of ``num_instances`` instances on ``hosts`` ((name, slots)
        pairs: the hosts it has now), with the job's backend and host options; TopologyError
        says what cannot work."""
        return elastic_layout(self.host_options, hosts, num_instances)


def elastic_layout(host_options: HostOptions, hosts: Sequence[Tuple[str, int]],
                   num_instances: int) -> Layout:
    """An elastic job's layout of ``num_instances`` on ``hosts`` (never mpirun)."""
    return topology.lay_out(num_instances, [hostlib.HostSlots(n, s) for n, s in hosts],
                            ELASTIC_HOSTS, host_options, fixed_world=False)


def build(params: Mapping[str, Any], environ: Mapping[str, str]) -> JobOptions:
    """The JobOptions of the command line's values ``params`` (keyed by the CLI's parameter
    names, as click gives them) in the environment ``environ``, checked; PlanError or
    TopologyError says what is wrong."""
    p = dict(params)
    check_values(p)
    elastic_given = elastic_setup.asked_for(p)
    named, source = hosts_at_start(p, environ)
    num_instances = p["num_instances"]
    if num_instances is None:
        num_instances = p["min_np"] if p["min_np"] is not None else \
            hostlib.default_instances(named) if source in ("-H", "--hostfile") else 1
    check_counts(num_instances, p["num_replicas"], p["ipus_per_replica"])
    outside = [i for i in p["only_output_from_instance"] or () if i >= num_instances]
    if outside:
        raise PlanError(
            f"--only-output-from-instance {outside[0]} is not an instance of this job; "
            f"expected 0..{num_instances - 1}.")
    outside = [i for i, _ in p["instance_mpi_local_args"] if i >= num_instances]
    if outside:
        raise PlanError(
            f"--instance-mpi-local-args {outside[0]}:... is not an instance of this job; "
            f"expected an index in 0..{num_instances - 1}.")
    argv = resolve_program(p["program"], p["args"])
    host_options = HostOptions(
        backend=p["backend"], in_allocation=source == hostlib.SLURM_ALLOCATION,
        oversubscribe=p["oversubscribe"], subnet=p["host_subnet"], iface=p["network_interface"],
        ssh=SshOptions(p["ssh_port"], p["ssh_identity"], p["ssh_config"], p["start_timeout"],
                       () if elastic_given else agent_from_environ(environ)),
        mpi_global_args=p["mpi_global_args"], mpi_local_args=p["mpi_local_args"],
        instance_mpi_local_args=p["instance_mpi_local_args"])
    elastic = elastic_setup.settle(p, num_instances, named, argv) if elastic_given else None
    exports = parse_exports(p["env"], environ)
    exported = _horovod_settings(p["timeline_filename"], p["autotune"], p["autotune_log_file"]) \
        + (((contract.TF1, "1"),) if p["tf1"] else ()) \
        + hang.environment(p.get("hang_timeout"), environ, exports) + exports
    if elastic is not None:
        layout = elastic_layout(host_options, elastic.hosts, elastic.first_size)
    else:
        layout = topology.lay_out(
            num_instances, named or [hostlib.HostSlots(LOCALHOST, num_instances)], source,
            host_options)
    return JobOptions(
        layout=layout, argv=argv, num_instances=num_instances, num_replicas=p["num_replicas"],
        ipus_per_replica=p["ipus_per_replica"], exported_env=exported,
        start_timeout=p["start_timeout"], grace_period=p["grace_period"],
        port_range=p["port_range"], max_restarts=p["max_restarts"], timeout=p["timeout"],
        output=OutputOptions(tag_output=p["tag_output"],
                             only_instance=p["only_output_from_instance"],
                             output_dir=p["output_dir"], tag_host=p["tag_output_host"],
                             timestamp=p["timestamp_output"]),
        placement=encode_placement("numa" if p["numa_aware"] else p["bind_to"],
                                   p["thread_budget"], p["gpus_per_instance"],
                                   p["report_bindings"]),
        tf_config_mode=p["tf_config"], evaluator=p["evaluator"], elastic=elastic,
        hang_timeout=p.get("hang_timeout"), hang_busy_timeout=p.get("hang_busy_timeout"),
        host_options=host_options)


def check_values(p: Mapping[str, Any]) -> None:
    """The checks of single values and of values against each other that need no host and no
    instance count (the command line's own callbacks checked each value's form and range)."""
    elastic_setup.check_values(p)
    if p["numa_aware"] and p["bind_to"] == "core":
        raise PlanError("--numa-aware binds each instance to a NUMA node and --bind-to core "
                        "to cores; give only one of them.")
    if p["evaluator"] and p["tf_config"] == "none":
        raise PlanError("--evaluator needs a TF_CONFIG cluster to evaluate, but --tf-config "
                        "none gives none; use --tf-config auto (the default), worker or chief "
                        "with --evaluator.")
    if p["host"] and p["hostfile"]:
        raise TopologyError("-H and --hostfile both name hosts; give one of them.")
    if p["host_subnet"]:
        import ipaddress
        try:
            ipaddress.ip_network(p["host_subnet"], strict=False)
        except ValueError:
            raise TopologyError(f"--host-subnet {p['host_subnet']!r} is not a subnet; expected "
                                f"CIDR notation such as 10.1.0.0/16.") from None


def hosts_at_start(p: Mapping[str, Any],
                   environ: Mapping[str, str]) -> Tuple[Optional[List[hostlib.HostSlots]], str]:
    """The hosts the job starts on and what named them: the host discovery script's first
    answer, -H, --hostfile, or the Slurm allocation's (``environ``: --backend slurm, or auto
    inside an allocation); (None, "localhost") for this host alone. Read once, here; what
    cannot be read is one sentence (PlanError or TopologyError)."""
    script = p["host_discovery_script"]
    if script:
        from popdist_launcher.launcher.elastic.discovery import script as discovery_script
        try:
            found = discovery_script.run_discovery(
                script, elastic_setup.slots_per_host(p),
                min(elastic_setup.DISCOVERY_TIMEOUT, p["start_timeout"]))
        except discovery_script.DiscoveryError as exc:
            raise PlanError(str(exc)) from None
        return [hostlib.HostSlots(name, count) for name, count in found], DISCOVERY_SCRIPT
    try:
        if p["host"]:
            return hostlib.parse_host_list(p["host"]), "-H"
        if p["hostfile"]:
            try:
                text = hostlib.read_hostfile(p["hostfile"])
            except hostlib.HostError as exc:
                raise hostlib.HostError(f"--hostfile {exc}") from None
            return hostlib.parse_hostfile(text, p["hostfile"]), "--hostfile"
        if p["backend"] == "slurm" or p["backend"] == "auto" and in_slurm_allocation(environ):
            return hostlib.slurm_hosts(dict(environ))
    except hostlib.HostError as exc:
        raise TopologyError(str(exc)) from None
    return None, LOCALHOST


def _horovod_settings(timeline: Optional[str], autotune: bool,
                      autotune_log: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """horovodrun's --timeline-filename, --autotune and --autotune-log-file as Horovod's variables
    (a -x of the same name, later in the list, wins)."""
    settings = []
    if timeline:
        settings.append(("HOROVOD_TIMELINE", os.path.abspath(timeline)))
    if autotune:
        settings.append(("HOROVOD_AUTOTUNE", "1"))
    if autotune_log:
        settings.append(("HOROVOD_AUTOTUNE_LOG", os.path.abspath(autotune_log)))
    return tuple(settings)
