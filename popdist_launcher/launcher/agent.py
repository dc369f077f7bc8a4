"""The job's agent, as torch.distributed.elastic's: plan an attempt, start and monitor it (one
Supervisor, one ``attempt-<n>/`` log folder), re-plan after a failure (--max-restarts)."""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Sequence, Tuple

from popdist_launcher.launcher.backends.base import Wiring
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output import LogFiles, Router, open_output_dir
from popdist_launcher.launcher.plan import LaunchPlan, build_plan, format_topology, horovod_tuning
from popdist_launcher.launcher.spawned import rendezvous
from popdist_launcher.launcher.attempt import JobResult, JobState
from popdist_launcher.launcher.supervisor import Supervisor
from popdist_launcher.launcher.topology import Layout


def run_job(options: JobOptions, say: Callable[[str], None],
            print_topology: Optional[Callable[[str], None]] = None) -> int:
    """Run the job with the agent its options call for; the exit code is the job's."""
    elastic = options.elastic
    if elastic is not None:
        if elastic.mode == "horovod" and print_topology is None:
            from popdist_launcher.launcher import elastic_horovod
            return elastic_horovod.run(options, say)
        from popdist_launcher.launcher.elastic_restarts import ElasticAgent
        return ElasticAgent(options, say).run(print_topology)
    return Agent(options, say).run(print_topology)


class Agent:
    """Runs every attempt of one job; the exit code is the last attempt's."""

    def __init__(self, options: JobOptions, say: Callable[[str], None]) -> None:
        self.options = options
        self.layout = options.layout
        self.say = say
        self.job_id = os.urandom(6).hex()  # POPRUN_JOB_ID: the same for every attempt
        self.attempt = 0
        self.retried_start = False
        self.num_instances = options.num_instances  # this attempt's (elastic jobs re-plan them)
        self.num_replicas = options.num_replicas

    def run(self, print_topology: Optional[Callable[[str], None]] = None) -> int:
        """Raises OutputDirError and the port/topology errors of ``Layout.prepare`` (one
        sentence each)."""
        options = self.options
        root_fd = open_output_dir(options.output.output_dir) if options.output.output_dir and \
            print_topology is None else None
        try:
            while True:
                with self.layout.prepare(options.port_range, int(options.evaluator)) as prepared:
                    plan = self._plan(prepared)
                    if print_topology is not None:
                        print_topology(format_topology(plan, self.layout.backend.name,
                                                       commands(self.layout, plan),
                                                       " (besides what it inherits)"))
                        return 0
                    result, supervisor = self._start_and_monitor(plan, prepared, root_fd)
                code = self._replan(result, supervisor)
                if code is not None:
                    return code
        finally:
            if root_fd is not None:
                os.close(root_fd)

    def _plan(self, prepared) -> LaunchPlan:
        """This attempt's plan: the layout's hosts with the ports just reserved."""
        options, layout = self.options, self.layout
        return build_plan(
            options.argv, self.num_instances, prepared.tf_ports,
            prepared.rendezvous_address, num_replicas=self.num_replicas,
            ipus_per_replica=options.ipus_per_replica, hosts=prepared.hosts,
            counts=layout.counts, exported_env=options.exported_env,
            start_timeout=options.start_timeout, grace_period=options.grace_period,
            restart_count=self.attempt, controller=layout.controller,
            tuning=horovod_tuning(layout.controller, os.environ), job_id=self.job_id,
            rendezvous_secret=rendezvous.new_secret(), placement=options.placement,
            tf_config_mode=options.tf_config_mode, evaluator=options.evaluator,
            evaluator_port=prepared.local_ports[0] if options.evaluator else 0)

    def _start_and_monitor(self, plan: LaunchPlan, prepared,
                           root_fd: Optional[int]) -> Tuple[JobResult, Supervisor]:
        """Start the attempt's instances and supervise them until the attempt ends."""
        options = self.options
        logs = LogFiles(root_fd, options.output.output_dir, self.attempt) \
            if root_fd is not None else None
        output = options.output._replace(instance_hosts=self.layout.instance_hosts())
        router = Router(plan.num_instances, output, logs,
                        extra=("evaluator",) if plan.evaluator else ())
        supervisor = Supervisor(plan, self.layout.backend, router,
                                rendezvous_socket=prepared.take_rendezvous_socket(),
                                timeout=options.timeout)
        prepared.release_binds()
        self._supervising(supervisor)
        try:
            return supervisor.run(), supervisor
        finally:
            router.close_all()

    def _supervising(self, supervisor: Supervisor) -> None:
        """Called with each attempt's supervisor before it runs (elastic jobs watch hosts)."""

    def _replan(self, result: JobResult, supervisor: Supervisor) -> Optional[int]:
        """None when another attempt follows (after a failure while restarts are left), else the
        job's exit code."""
        if self._retry_start(result, supervisor):
            return None
        if result.state is not JobState.FAILED or self.attempt == self.options.max_restarts:
            return result.exit_code
        self.attempt += 1
        self.say(f"poprun-lite: restarting the job on every host (restart {self.attempt} of "
                 f"{self.options.max_restarts}, fresh ports); POPRUN_RESTART_COUNT="
                 f"{self.attempt}.")
        return None

    def _retry_start(self, result: JobResult, supervisor: Supervisor) -> bool:
        """Start once more (not a restart) after the engine's known start-up transient."""
        if result.state is JobState.FAILED and not self.retried_start \
                and supervisor.engine_failed_to_start():
            self.retried_start = True
            self.say(f"poprun-lite: {self.layout.backend.name} failed before starting any "
                     f"instance; starting it once more.")
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
