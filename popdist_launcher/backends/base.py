"""The interface every backend implements."""
from __future__ import annotations

import abc
from typing import Dict, List, Mapping, Optional

from popdist_launcher.plan import LaunchPlan


class Backend(abc.ABC):
    """Starts instances of a plan: one class per way of starting processes.

    The supervisor runs ``command(plan, i)`` with ``environment(plan, i, ...)`` for every
    instance. When ``uses_control_channel(plan, i)`` is true the started process is a remote
    session (ssh) whose stdin carries signals to the real instance and whose stderr begins with
    the start marker of ``popdist_launcher._exec``.
    """

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

    def uses_control_channel(self, plan: LaunchPlan, index: int) -> bool:
        return False

    def explain_exit(self, plan: LaunchPlan, index: int, returncode: int) -> Optional[str]:
        """A backend-specific reading of an exit status (e.g. ssh's 255), or None."""
        return None
