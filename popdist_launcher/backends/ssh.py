"""Instances on other hosts through the system's ssh client; instances on the launcher's own
host start as local children, exactly as the local backend starts them.

Each remote instance is one ``ssh -T HOST 'exec env ... python -m popdist_launcher._exec
--control -- PROGRAM ...'`` session. The ssh client is the launcher's child (its own process
group, watched like any instance); on the host, ``_exec`` runs the program in a process group,
turns bytes on the session's stdin into signals, and kills the group when the session ends. So
a forwarded signal, the job's stop and the launcher's death (the watchdog kills the ssh client)
all reach every process on every host.
"""
from __future__ import annotations

import os
import signal
from typing import Dict, List, Mapping, Optional

from popdist_launcher.backends.local import LocalBackend
from popdist_launcher.plan import LaunchPlan
from popdist_launcher.remote import SshOptions, remote_command


class SshBackend(LocalBackend):
    name = "ssh"

    def __init__(self, options: SshOptions = SshOptions(), cwd: Optional[str] = None) -> None:
        self.options = options
        self.cwd = cwd or os.getcwd()

    def uses_control_channel(self, plan: LaunchPlan, index: int) -> bool:
        return not plan.instances[index].host.local

    def command(self, plan: LaunchPlan, index: int) -> List[str]:
        if not self.uses_control_channel(plan, index):
            return super().command(plan, index)
        env = {"PYTHONUNBUFFERED": "1", **plan.instance_env(index)}
        line = remote_command(plan.program, env, cwd=self.cwd, control=True)
        return self.options.argv(plan.instances[index].host.name, line)

    def environment(self, plan: LaunchPlan, index: int, inherited: Mapping[str, str]) -> Dict[str, str]:
        if not self.uses_control_channel(plan, index):
            return super().environment(plan, index, inherited)
        return dict(inherited)  # the ssh client's own; the instance's travels on the command line

    def explain_exit(self, plan: LaunchPlan, index: int, returncode: int) -> Optional[str]:
        if not self.uses_control_channel(plan, index):
            return None
        if returncode == 255:
            return (f"lost its ssh session to {plan.instances[index].host.name} (ssh exited with "
                    f"255: connection refused, dropped or timed out)")
        if 128 < returncode < 160:  # _exec's report of a death by signal on the host
            try:
                return f"was killed by {signal.Signals(returncode - 128).name}"
            except ValueError:
                return None
        return None
