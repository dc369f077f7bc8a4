"""Instances on the launcher's host: the launcher forks one wrapper per instance itself."""
from __future__ import annotations

from typing import List, Sequence

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.backends.base import (Backend, EngineError, HostOptions,
                                                             Launch, Situation, Wiring)
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.launcher.layout.remote import SshOptions


class LocalBackend(Backend):
    name = option = "local"
    auto_rank = 3

    @classmethod
    def available(cls, situation: Situation) -> bool:
        return situation.all_local

    @classmethod
    def build(cls, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
              options: HostOptions, ssh: SshOptions) -> "LocalBackend":
        remote = next((s.name for s, n in zip(slots, counts)
                       if n and not hostlib.is_local(s.name)), None)
        if remote is not None:
            raise EngineError(f"--backend local cannot start instances on {remote}; use "
                              f"--backend ssh (or auto) for other hosts.")
        return cls()

    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        return [Launch(f"instance {i}", (i,)) for i in range(plan.num_instances)]

    def launch_one(self, index: int, host: Host, wiring: Wiring, secret: str) -> Launch:
        return Launch(f"instance {index}", (index,))
