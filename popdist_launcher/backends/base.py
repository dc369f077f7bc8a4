"""The interface every backend implements."""
from __future__ import annotations

import abc
from typing import Dict, List, Mapping

from popdist_launcher.plan import LaunchPlan


class Backend(abc.ABC):
    """Starts instances of a plan: one class per way of starting processes."""

    name: str = ""

    @classmethod
    def available(cls) -> bool:
        """Whether this backend can run on this machine."""
        return True

    @abc.abstractmethod
    def command(self, plan: LaunchPlan, index: int) -> List[str]:
        """The argv the launcher runs to start instance ``index``."""

    @abc.abstractmethod
    def environment(self, plan: LaunchPlan, index: int, inherited: Mapping[str, str]) -> Dict[str, str]:
        """The full environment of the process the launcher starts for instance ``index``."""
