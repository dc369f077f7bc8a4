"""Which TensorFlow this environment has, read from the installed distributions' metadata
without importing TensorFlow: ``tensorflow``, ``tensorflow-cpu``, ``tensorflow-macos``,
``tensorflow-rocm``, ``tf-nightly`` ... all install the same ``tensorflow`` package."""
from __future__ import annotations

import dataclasses
import re
from importlib import metadata
from typing import List, Optional

# The releases this project is built and tested with (both stacks of `make setup`).
TESTED = ((2, 15), (2, 21))


@dataclasses.dataclass(frozen=True)
class TensorFlowDist:
    """One installed distribution that provides the ``tensorflow`` package."""
    name: str
    version: str

    @property
    def release(self) -> tuple:
        """(major, minor) of the version."""
        numbers = [int(p) for p in self.version.split(".")[:2] if p.isdigit()]
        return tuple(numbers + [0] * (2 - len(numbers)))

    @property
    def tested(self) -> bool:
        return TESTED[0] <= self.release <= TESTED[1]


def all_installed() -> List[TensorFlowDist]:
    """Every distribution that installs files into the ``tensorflow`` package, by name (two
    of them, e.g. ``tensorflow`` and ``tensorflow-cpu``, overwrite each other's files).
    TensorFlow's own helper distributions (tensorflow-estimator, -io-gcs-filesystem ...)
    have packages of their own and are not among them."""
    names = metadata.packages_distributions().get("tensorflow", [])
    found = {}
    for name in names:
        try:
            normal = re.sub(r"[-_.]+", "-", name).lower()  # tensorflow_cpu: tensorflow-cpu
            found[normal] = TensorFlowDist(normal, metadata.version(name))
        except metadata.PackageNotFoundError:
            continue
    return [found[k] for k in sorted(found)]


def installed() -> Optional[TensorFlowDist]:
    """The TensorFlow distribution (the first by name where there are several), or None."""
    found = all_installed()
    return found[0] if found else None
