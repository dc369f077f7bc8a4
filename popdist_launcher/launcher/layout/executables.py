"""An executable on PATH (or beside this interpreter: a virtualenv's own tools, such as PyPI's
Open MPI, where the virtualenv is not activated), found without importing shutil (the
launcher's start-up path); the plan, the backends and the install tools ask it, so it sits
below them."""
from __future__ import annotations

import os
import sys
from typing import Optional


def which(name: str) -> Optional[str]:
    """The executable ``name`` on PATH, as PATH names it; ``shutil.which`` without importing
    shutil (the launcher's start-up path)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find(name: str) -> Optional[str]:
    """The executable ``name`` on PATH (as an absolute path), else the one beside this
    interpreter (its virtualenv's ``bin/``), else None."""
    found = which(name)
    if found is not None:
        return os.path.abspath(found)  # PATH may name the venv relatively
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.isfile(beside) and os.access(beside, os.X_OK) else None
