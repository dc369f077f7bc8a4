"""The plainest command, ``poprun-lite -np N PROGRAM [ARGS]``, run without click.

Its options are the command line's defaults (DEFAULTS, held equal to what click parses by
tests/test_fast_start.py), so the job is built and started without importing click and what it
imports (~20 ms of CPU that the instances' interpreters would otherwise share two cores with).
A command that is not plain, or that the options refuse, goes through the CLI (launch.py), which
reports it in its own words.
"""
import gc

_COLLECTING = gc.isenabled()
gc.disable()  # as in launch.py: the imports below make no garbage worth a collection pass

import sys  # noqa: E402
from typing import Dict, Mapping, Optional, Sequence  # noqa: E402

from popdist_launcher.launcher import fast_start, options, ports, topology  # noqa: E402
from popdist_launcher.launcher.agent import run_job  # noqa: E402
from popdist_launcher.launcher.plan import PlanError  # noqa: E402

PROG = "poprun-lite"
# The values click gives every option of ``poprun-lite -np N PROGRAM [ARGS]`` (no option set in
# the environment or a config file), by parameter name.
DEFAULTS: Dict[str, object] = {
    "num_replicas": None, "ipus_per_replica": 1, "env": (), "only_output_from_instance": None,
    "output_dir": None, "tag_output": True, "tag_output_host": False, "timestamp_output": False,
    "start_timeout": 120.0, "grace_period": 10.0, "timeout": None, "port_range": None,
    "host": None, "hostfile": None, "oversubscribe": False, "backend": "auto", "ssh_port": None,
    "ssh_identity": None, "ssh_config": None, "network_interface": None, "host_subnet": None,
    "mpi_global_args": "", "mpi_local_args": "", "instance_mpi_local_args": (),
    "numa_aware": False, "bind_to": "none", "thread_budget": True, "gpus_per_instance": "auto",
    "report_bindings": False, "timeline_filename": None, "autotune": False,
    "autotune_log_file": None, "tf_config": "auto", "tf1": False, "evaluator": False,
    "max_restarts": 0, "min_np": None, "max_np": None, "host_discovery_script": None,
    "slots_per_host": None, "elastic_timeout": None, "reset_limit": None,
    "host_failure_limit": None,
    "blacklist_cooldown_range": None, "elastic_mode": "auto", "print_topology": False,
    "export_config": None, "overwrite_config": False, "verbose": 0,
    # PopRun's IPU options (launch.IPU_ONLY)
    "num_ilds": None, "vipu_server_host": None, "vipu_server_port": None,
    "vipu_server_timeout": None, "vipu_partition": None, "vipu_partition_attempts": None,
    "vipu_cluster": None, "vipu_allocation": None, "executable_cache_path": None,
    "update_partition": False, "reset_partition": False, "remove_partition": False,
    "offline_mode": False,
}


def params(argv: Sequence[str], environ: Mapping[str, str]) -> Optional[Dict[str, object]]:
    """The CLI's values for ``argv`` when it is plain (fast_start.plain_count); else None."""
    count = fast_start.plain_count(argv, environ)
    if count is None:
        return None
    return dict(DEFAULTS, num_instances=count, program=argv[2], args=tuple(argv[3:]))


def run(argv: Sequence[str], environ: Mapping[str, str]) -> Optional[int]:
    """Run the plain command ``argv`` and return its exit code; None when it is not plain or its
    options are refused (the CLI then runs it and says why)."""
    values = params(argv, environ)
    if values is None:
        return None
    try:
        job = options.build(values, environ)
    except (PlanError, topology.TopologyError):
        return None
    try:
        code = run_job(job, _say, None)
        return code if isinstance(code, int) else 0  # never None: that would run it again
    except (ports.PortError, topology.TopologyError) as exc:  # as click.ClickException prints
        _say(f"{PROG}: error: {exc}")
        return 1


def _say(message: str) -> None:
    """The CLI's ``click.echo(message, err=True)``."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


gc.freeze()
if _COLLECTING:
    gc.enable()
