"""Instances on other hosts through the system's ssh client; instances on the launcher's own
host are forked as the local backend forks them.

Each remote instance is one ``ssh -T HOST 'exec python -m popdist_launcher.launcher.spawned.
instance --connect tcp:ADDR:PORT --index I ... --secret-stdin'`` session; the job secret travels
on the session's stdin (never on a command line), and the program, its arguments and its
environment come over the wrapper's own connection.
"""
from __future__ import annotations

import shlex
from typing import List, Optional, Sequence

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.backends.base import (Backend, HostOptions, Launch,
                                                             Situation, Wiring)
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.launcher.layout.remote import SshOptions


class SshBackend(Backend):
    name = option = "ssh"
    auto_rank = 2

    def __init__(self, options: SshOptions = SshOptions()) -> None:
        self.options = options

    @classmethod
    def available(cls, situation: Situation) -> bool:
        return not situation.all_local

    @classmethod
    def build(cls, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
              options: HostOptions, ssh: SshOptions) -> "SshBackend":
        return cls(ssh)

    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        return [self.launch_one(inst.index, inst.host, wiring, secret) for inst in plan.instances]

    def launch_one(self, index: int, host: Host, wiring: Wiring, secret: str) -> Launch:
        if host.local:
            return Launch(f"instance {index}", (index,))
        words = wiring.wrapper_argv("--index", str(index), "--secret-stdin", unix=False)
        line = "exec " + " ".join(shlex.quote(w) for w in words)
        return Launch(f"ssh {host.name}", (index,), tuple(self.options.argv(host.name, line)),
                      stdin=secret.encode() + b"\n")

    def explain_engine_exit(self, launch: Launch, returncode: int) -> Optional[str]:
        if returncode == 255:
            host = launch.label.split(" ", 1)[1]
            return (f"lost its ssh session to {host} (ssh exited with 255: connection refused, "
                    f"dropped or timed out)")
        return None
