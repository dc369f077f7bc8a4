"""Instances as child processes of the launcher, on this host."""
from __future__ import annotations

from typing import Dict, List, Mapping

from popdist_launcher.backends.base import Backend
from popdist_launcher.plan import LaunchPlan


class LocalBackend(Backend):
    name = "local"

    def command(self, plan: LaunchPlan, index: int) -> List[str]:
        return list(plan.program)

    def environment(self, plan: LaunchPlan, index: int, inherited: Mapping[str, str]) -> Dict[str, str]:
        env = dict(inherited)
        env.setdefault("PYTHONUNBUFFERED", "1")  # so lines reach the console as they are printed
        env.update(plan.instance_env(index))
        return env
