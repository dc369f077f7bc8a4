"""An executable on PATH, found without importing shutil (the launcher's start-up path); the plan
and the backends both ask it, so it sits below them."""
from __future__ import annotations

import os
from typing import Optional


def which(name: str) -> Optional[str]:
    """The executable ``name`` on PATH, as PATH names it; ``shutil.which`` without importing
    shutil (the launcher's start-up path)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None
