"""Instances on the launcher's host: the launcher forks one wrapper per instance itself."""
from __future__ import annotations

from typing import List

from popdist_launcher.launcher.layout.backends.base import Backend, Launch, Wiring
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan


class LocalBackend(Backend):
    name = "local"

    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        return [Launch(f"instance {i}", (i,)) for i in range(plan.num_instances)]

    def launch_one(self, index: int, host: Host, wiring: Wiring, secret: str) -> Launch:
        return Launch(f"instance {index}", (index,))
