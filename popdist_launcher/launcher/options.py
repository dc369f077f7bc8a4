"""The job's options as one validated, frozen value: what the command line asked for, with the
host layout it chose; ``build`` checks the command line's values into it and the agent takes it.
Nothing here imports click: the command line (launch.py) is the one place that knows it."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Tuple

from popdist_launcher import _contract
from popdist_launcher.launcher import topology
from popdist_launcher.launcher.output import OutputOptions
from popdist_launcher.launcher.plan import PlanError, check_counts, parse_exports, resolve_program
from popdist_launcher.launcher.remote import SshOptions, agent_from_environ
from popdist_launcher.launcher.spawned.placement import encode as encode_placement
from popdist_launcher.launcher.topology import Layout

if TYPE_CHECKING:
    from popdist_launcher.launcher.elastic.setup import ElasticOptions


class JobOptions(NamedTuple):
    """Everything the job's attempts need; checked by the command line before it is built."""

    layout: Layout
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
    elastic: Optional["ElasticOptions"] = None  # --min-np, --max-np, --host-discovery-script
    hang_timeout: Optional[float] = None  # --hang-timeout: None the default bound, 0 off

    @property
    def replicas_per_instance(self) -> int:
        """Replicas each instance holds: --num-replicas / -np (check_counts made it whole), 1
        by default. Every attempt and round of a job keeps it, whatever its instance count."""
        return (self.num_replicas or self.num_instances) // self.num_instances


def build(params: Mapping[str, Any], environ: Mapping[str, str]) -> JobOptions:
    """The JobOptions of the command line's values ``params`` (keyed by the CLI's parameter
    names, as click gives them), checked; PlanError or TopologyError says what is wrong."""
    p = dict(params)
    min_np, max_np = p["min_np"], p["max_np"]
    elastic_given = min_np is not None or max_np is not None or bool(p["host_discovery_script"])
    for flag, value in (("--min-np", min_np), ("--max-np", max_np)):
        if value is not None and value < 1:
            raise PlanError(f"{flag} must be at least 1 (got {value}).")
    if not elastic_given:
        _only_elastic(slots_per_host=p["slots_per_host"], elastic_timeout=p["elastic_timeout"],
                      reset_limit=p["reset_limit"],
                      blacklist_cooldown_range=p["blacklist_cooldown_range"],
                      host_failure_limit=p["host_failure_limit"],
                      elastic_mode=None if p["elastic_mode"] == "auto" else p["elastic_mode"])
    num_instances = p["num_instances"]
    if num_instances is None:
        num_instances = min_np if min_np is not None else _default_instances(p["host"],
                                                                             p["hostfile"])
    check_counts(num_instances, p["num_replicas"], p["ipus_per_replica"])
    if p["grace_period"] < 0:
        raise PlanError(f"--grace-period must be 0 or more seconds, got {p['grace_period']:g}.")
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
    if p["numa_aware"] and p["bind_to"] == "core":
        raise PlanError("--numa-aware binds each instance to a NUMA node and --bind-to core "
                        "to cores; give only one of them.")
    if p["evaluator"] and p["tf_config"] == "none":
        raise PlanError("--evaluator needs a TF_CONFIG cluster to evaluate, but --tf-config "
                        "none gives none; use --tf-config auto (the default), worker or chief "
                        "with --evaluator.")
    argv = resolve_program(p["program"], p["args"])
    backend, start_timeout = p["backend"], p["start_timeout"]
    subnet, iface, oversubscribe = p["host_subnet"], p["network_interface"], p["oversubscribe"]
    elastic = None
    if elastic_given:
        if backend == "mpi":
            raise PlanError(
                "--min-np/--max-np/--host-discovery-script need Gloo: an MPI world is fixed "
                "when mpirun starts; use --backend ssh (or local on one host), or drop the "
                "elastic options.")
        if p["max_restarts"]:
            raise PlanError("--max-restarts is for fixed worlds; with --min-np/--max-np/"
                            "--host-discovery-script use --reset-limit.")
        if p["evaluator"]:
            raise PlanError("--evaluator needs a fixed cluster; drop it or the elastic "
                            "options.")
        from popdist_launcher.launcher.elastic import setup as elastic_setup
        ssh = SshOptions(p["ssh_port"], p["ssh_identity"], p["ssh_config"], start_timeout, ())
        elastic = elastic_setup.check(
            num_instances, min_np, max_np, p["host_discovery_script"], p["slots_per_host"],
            p["elastic_timeout"], p["reset_limit"], p["blacklist_cooldown_range"],
            p["elastic_mode"], p["host_failure_limit"], argv, host=p["host"],
            hostfile=p["hostfile"],
            oversubscribe=oversubscribe, backend=backend, start_timeout=start_timeout,
            choose=lambda n, slots, chosen: topology.choose(
                n, backend=chosen, environ=environ, subnet=subnet, iface=iface,
                oversubscribe=oversubscribe, ssh=ssh, host_slots=slots))
    exported = _horovod_settings(p["timeline_filename"], p["autotune"], p["autotune_log_file"]) \
        + (((_contract.TF1, "1"),) if p["tf1"] else ()) + parse_exports(p["env"], environ)
    layout = elastic.relayout(elastic.hosts, elastic.first_size) if elastic else topology.choose(
        num_instances, host=p["host"], hostfile=p["hostfile"], oversubscribe=oversubscribe,
        backend=backend, environ=environ, subnet=subnet, iface=iface,
        mpi_global_args=p["mpi_global_args"], mpi_local_args=p["mpi_local_args"],
        ssh=SshOptions(p["ssh_port"], p["ssh_identity"], p["ssh_config"], start_timeout,
                       agent_from_environ(environ)),
        instance_mpi_local_args=p["instance_mpi_local_args"])
    output = OutputOptions(tag_output=p["tag_output"], only_instance=p["only_output_from_instance"],
                           output_dir=p["output_dir"], tag_host=p["tag_output_host"],
                           timestamp=p["timestamp_output"])
    return JobOptions(
        layout=layout, argv=argv, num_instances=num_instances, num_replicas=p["num_replicas"],
        ipus_per_replica=p["ipus_per_replica"], exported_env=exported,
        start_timeout=start_timeout, grace_period=p["grace_period"], port_range=p["port_range"],
        max_restarts=p["max_restarts"], timeout=p["timeout"], output=output,
        placement=encode_placement("numa" if p["numa_aware"] else p["bind_to"],
                                   p["thread_budget"], p["gpus_per_instance"],
                                   p["report_bindings"]),
        tf_config_mode=p["tf_config"], evaluator=p["evaluator"], elastic=elastic,
        hang_timeout=p.get("hang_timeout"))


def _only_elastic(**given: Any) -> None:
    """Elastic settings without an elastic job (no --min-np, --max-np or --host-discovery-script)
    would be silently ignored: refuse them."""
    named = ["--" + name.replace("_", "-") for name, value in given.items() if value is not None]
    if named:
        raise PlanError(f"{', '.join(named)} only {'applies' if len(named) == 1 else 'apply'} to "
                        f"elastic jobs; add --min-np, --max-np or --host-discovery-script, or "
                        f"drop {'it' if len(named) == 1 else 'them'}.")


def _default_instances(host: Optional[str], hostfile: Optional[str]) -> int:
    """-np when not given: one per slot of -H or --hostfile (mpirun), else 1. A host list that
    cannot be read counts 1 here; laying out the hosts reports what is wrong with it."""
    from popdist_launcher.launcher import hosts as hostlib
    try:
        if host:
            return hostlib.default_instances(hostlib.parse_host_list(host))
        if hostfile:
            return hostlib.default_instances(
                hostlib.parse_hostfile(hostlib.read_hostfile(hostfile), hostfile))
    except hostlib.HostError:
        pass
    return 1


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
