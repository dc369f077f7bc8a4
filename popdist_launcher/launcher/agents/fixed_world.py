"""The job's agent, in the shape of torch.distributed.elastic's ``SimpleElasticAgent``: start an
attempt's instances and monitor them (one Supervisor, one ``attempt-<n>/`` log folder), then
decide: the job's exit code, or another attempt (here: after a failure, --max-restarts). The
elastic agents (``elastic_restart.py``, ``elastic_horovod.py``) take the same shape and decide
by their own rules."""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Sequence, Set, Tuple

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.layout.backends.base import Wiring
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output.routing import LogFiles, Router, open_output_dir
from popdist_launcher.launcher.layout.plan import (LaunchPlan, build_plan, format_topology,
                                                   horovod_tuning)
from popdist_launcher.wire import rendezvous
from popdist_launcher.launcher.supervision.attempt import JobResult, JobState
from popdist_launcher.launcher.supervision.supervisor import Supervisor
from popdist_launcher.launcher.layout.topology import Layout


class Agent:
    """Runs every attempt of one job; the exit code is the last attempt's."""

    def __init__(self, options: JobOptions) -> None:
        self.options = options
        self.layout = options.layout
        self.job_id = os.urandom(6).hex()  # POPRUN_JOB_ID: the same for every attempt
        self.attempt = 0
        self.retried_start = False
        self.num_instances = options.num_instances  # this attempt's (elastic jobs re-plan them)
        self.replicas_per_instance = options.replicas_per_instance
        self.supervisor: Optional[Supervisor] = None  # the running attempt's
        self.notices_shown: Set[bytes] = set()  # TensorFlow's start-up notices: once a job

    def run(self, print_topology: Optional[Callable[[str], None]] = None) -> int:
        """Run every attempt; the exit code is the job's. With ``print_topology``, print the
        first attempt's topology instead and return 0. Raises OutputDirError and the
        port/topology errors of ``Layout.prepare`` (one sentence each)."""
        if print_topology is not None:
            return self._print_topology(print_topology)
        output_dir = self.options.output.output_dir
        root_fd = open_output_dir(output_dir) if output_dir else None
        try:
            while True:
                code = self._attempt(root_fd)
                if code is not None:
                    return code
        finally:
            if root_fd is not None:
                os.close(root_fd)

    def _print_topology(self, print_topology: Callable[[str], None]) -> int:
        with self.layout.prepare(self.options.port_range, int(self.options.evaluator)) as prepared:
            plan = self._plan(prepared)
            print_topology(format_topology(plan, self.layout.backend.name,
                                           commands(self.layout, plan),
                                           " (besides what it inherits)"))
        return 0

    def _plan(self, prepared) -> LaunchPlan:
        """This attempt's plan: the layout's hosts with the ports just reserved."""
        options, layout = self.options, self.layout
        return build_plan(
            options.argv, self.num_instances, prepared.tf_ports,
            prepared.rendezvous_address,
            num_replicas=self.num_instances * self.replicas_per_instance,
            ipus_per_replica=options.ipus_per_replica, hosts=prepared.hosts,
            counts=layout.counts, exported_env=options.exported_env,
            start_timeout=options.start_timeout, grace_period=options.grace_period,
            restart_count=self.attempt, controller=layout.controller,
            tuning=horovod_tuning(layout.controller, os.environ), job_id=self.job_id,
            rendezvous_secret=rendezvous.new_secret(), placement=options.placement,
            tf_config_mode=options.tf_config_mode, evaluator=options.evaluator,
            evaluator_port=prepared.local_ports[0] if options.evaluator else 0)

    def _attempt(self, root_fd: Optional[int]) -> Optional[int]:
        """One attempt, started, monitored and decided: the job's exit code, or None when
        another attempt follows."""
        return self._decide(self._start_and_monitor(root_fd))

    def _start_and_monitor(self, root_fd: Optional[int]) -> JobResult:
        """Plan the attempt (fresh ports), start its instances and supervise them until the
        attempt ends."""
        options = self.options
        with self.layout.prepare(options.port_range, int(options.evaluator)) as prepared:
            plan = self._plan(prepared)
            logs = LogFiles(root_fd, options.output.output_dir, self.attempt) \
                if root_fd is not None else None
            output = options.output._replace(instance_hosts=self.layout.instance_hosts())
            router = Router(plan.num_instances, output, logs,
                            extra=("evaluator",) if plan.evaluator else (),
                            shown=self.notices_shown)
            supervisor = self.supervisor = Supervisor(
                plan, self.layout.backend, router,
                rendezvous_socket=prepared.take_rendezvous_socket(), timeout=options.timeout,
                hang_timeout=options.hang_timeout,
                hang_busy_timeout=options.hang_busy_timeout)
            prepared.release_binds()
            self._supervising(supervisor)
            try:
                return supervisor.run()
            finally:
                router.close_all()

    def _supervising(self, supervisor: Supervisor) -> None:
        """Called with each attempt's supervisor before it runs (elastic jobs watch hosts)."""

    def _decide(self, result: JobResult) -> Optional[int]:
        """None when another attempt follows (after a failure while restarts are left), else the
        job's exit code."""
        if self._retry_start(result):
            return None
        if result.state is not JobState.FAILED or self.attempt == self.options.max_restarts:
            return result.exit_code
        self.attempt += 1
        console.say(f"restarting the job on every host (restart {self.attempt} of "
                    f"{self.options.max_restarts}, fresh ports); POPRUN_RESTART_COUNT="
                    f"{self.attempt}.")
        return None

    def _retry_start(self, result: JobResult) -> bool:
        """Start once more (not a restart) after the engine's known start-up transient."""
        if result.state is JobState.FAILED and not self.retried_start \
                and self.supervisor.engine_failed_to_start():
            self.retried_start = True
            console.say(f"{self.layout.backend.name} failed before starting any instance; "
                        f"starting it once more.")
            return True
        return False


def commands(layout: Layout, plan: LaunchPlan) -> List[Tuple[str, Sequence[str]]]:
    """Who each start command starts, and the command, as --print-topology shows them."""
    wiring = Wiring("LAUNCHER_SOCKET", ("LAUNCHER_ADDRESS", 0), plan.start_timeout)
    shown = []
    for launch in layout.backend.launches(plan, wiring, secret="SECRET"):
        who = ", ".join(str(i) for i in launch.instances)
        who = f"instance {who}" if len(launch.instances) == 1 else f"instances {who}"
        shown.append((who, launch.argv or plan.program))
    return shown
