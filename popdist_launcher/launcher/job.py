"""A whole job: its attempts (the first run and each restart), every one with fresh ports, its
own supervisor and its own ``attempt-<n>/`` log folder."""
from __future__ import annotations

import os
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.spawned import rendezvous
from popdist_launcher.launcher.backends.base import Wiring
from popdist_launcher.launcher.output import LogFiles, OutputOptions, Router, open_output_dir
from popdist_launcher.launcher.supervisor import JobState, Supervisor
from popdist_launcher.launcher.plan import build_plan, format_topology, horovod_tuning
from popdist_launcher.launcher.topology import Layout


class JobOptions(NamedTuple):
    """What the command line asked for, beyond the layout."""

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


def commands(layout: Layout, plan) -> List[Tuple[str, Sequence[str]]]:
    """Who each start command starts, and the command, as --print-topology shows them."""
    wiring = Wiring("LAUNCHER_SOCKET", ("LAUNCHER_ADDRESS", 0), plan.start_timeout)
    shown = []
    for launch in layout.backend.launches(plan, wiring, secret="SECRET"):
        who = ", ".join(str(i) for i in launch.instances)
        who = f"instance {who}" if len(launch.instances) == 1 else f"instances {who}"
        shown.append((who, launch.argv or plan.program))
    return shown


def run(layout: Layout, options: JobOptions, say: Callable[[str], None],
        print_topology: Optional[Callable[[str], None]] = None) -> int:
    """Run every attempt; the exit code is the last attempt's. Raises OutputDirError and the
    port/topology errors of ``Layout.prepare`` (one sentence each)."""
    root_fd = open_output_dir(options.output.output_dir) if options.output.output_dir and \
        print_topology is None else None
    job_id = os.urandom(6).hex()  # POPRUN_JOB_ID: the same for every attempt
    attempt, retried_start = 0, False
    try:
        while True:
            with layout.prepare(options.port_range, int(options.evaluator)) as prepared:
                plan = build_plan(
                    options.argv, options.num_instances, prepared.tf_ports,
                    prepared.rendezvous_address, num_replicas=options.num_replicas,
                    ipus_per_replica=options.ipus_per_replica, hosts=prepared.hosts,
                    counts=layout.counts, exported_env=options.exported_env,
                    start_timeout=options.start_timeout, grace_period=options.grace_period,
                    restart_count=attempt, controller=layout.controller,
                    tuning=horovod_tuning(layout.controller, os.environ), job_id=job_id,
                    rendezvous_secret=rendezvous.new_secret(), placement=options.placement,
                    tf_config_mode=options.tf_config_mode, evaluator=options.evaluator,
                    evaluator_port=prepared.local_ports[0] if options.evaluator else 0)
                if print_topology is not None:
                    print_topology(format_topology(plan, layout.backend.name,
                                                   commands(layout, plan),
                                                   " (besides what it inherits)"))
                    return 0
                logs = LogFiles(root_fd, options.output.output_dir, attempt) \
                    if root_fd is not None else None
                router = Router(plan.num_instances, options.output, logs,
                                extra=("evaluator",) if plan.evaluator else ())
                supervisor = Supervisor(plan, layout.backend, router,
                                        rendezvous_socket=prepared.take_rendezvous_socket(),
                                        timeout=options.timeout)
                prepared.release_binds()
                try:
                    result = supervisor.run()
                finally:
                    router.close_all()
            if result.state is JobState.FAILED and not retried_start \
                    and supervisor.engine_failed_to_start():
                retried_start = True  # a known transient of the engine's start-up: not a restart
                say(f"poprun-lite: {layout.backend.name} failed before starting any instance; "
                    f"starting it once more.")
                continue
            if result.state is not JobState.FAILED or attempt == options.max_restarts:
                return result.exit_code
            attempt += 1
            say(f"poprun-lite: restarting the job on every host (restart {attempt} of "
                f"{options.max_restarts}, fresh ports); POPRUN_RESTART_COUNT={attempt}.")
    finally:
        if root_fd is not None:
            os.close(root_fd)
