"""Which elastic mode suits a program: Horovod's elastic protocol for programs written for
``horovodrun`` elastic (``hvd.elastic.run``, elastic states), elastic restarts for the rest.

The launcher cannot ask a program before it runs, so it reads the program's source: the script,
and the modules beside it that the script imports by name. ``--elastic-mode`` overrides this.
"""
from __future__ import annotations

import os
import re
from typing import Sequence

HOROVOD = "horovod"
RESTART = "restart"
_ELASTIC = re.compile(rb"hvd\.elastic\b|horovod\.(?:tensorflow|keras|tensorflow\.keras|torch)"
                      rb"\.elastic\b|from\s+horovod\.\S+\s+import\s+[^\n]*\belastic\b")
_IMPORT = re.compile(rb"^\s*(?:from|import)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_LIMIT = 1 << 20  # bytes read of each file


def detect(argv: Sequence[str]) -> str:
    """HOROVOD when the program's Python source uses Horovod's elastic API, else RESTART."""
    script = next((a for a in argv[:3] if a.endswith(".py") and os.path.isfile(a)), None)
    if script is None:
        return RESTART
    source = _read(script)
    if _ELASTIC.search(source):
        return HOROVOD
    folder = os.path.dirname(os.path.abspath(script))
    for name in dict.fromkeys(m.decode() for m in _IMPORT.findall(source)):
        sibling = os.path.join(folder, name + ".py")
        if os.path.isfile(sibling) and _ELASTIC.search(_read(sibling)):
            return HOROVOD
    return RESTART


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_LIMIT)
    except OSError:
        return b""
