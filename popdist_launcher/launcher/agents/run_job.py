"""Which agent runs a job: the fixed-world agent, or one of the two elastic agents (Horovod's
elastic protocol, elastic restarts) when --min-np/--max-np/--host-discovery-script ask for one."""
from __future__ import annotations

from typing import Callable, Optional

from popdist_launcher.launcher.options import JobOptions


def run_job(options: JobOptions,
            print_topology: Optional[Callable[[str], None]] = None) -> int:
    """Run the job with the agent its options call for; the exit code is the job's. With
    ``print_topology``, the first attempt's topology is printed instead (an elastic job in
    Horovod mode shows the restart agent's first attempt: the same hosts and variables)."""
    elastic = options.elastic
    if elastic is None:
        from popdist_launcher.launcher.agents.fixed_world import Agent
        return Agent(options).run(print_topology)
    if elastic.mode == "horovod" and print_topology is None:
        from popdist_launcher.launcher.agents.elastic_horovod import HorovodAgent
        return HorovodAgent(options).run()
    from popdist_launcher.launcher.agents.elastic_restart import RestartAgent
    return RestartAgent(options).run(print_topology)
