"""What an IPU program sees of its environment under poprun-lite: what PopRun gave it. PopRun
started each instance through mpirun and set no ``HOROVOD_*`` variable (Horovod found its ranks
through MPI), so programs written for it tell horovodrun's instances by those variables.
poprun-lite sets Horovod's ranks and rendezvous for a plain ``hvd.init()`` and names them in
``POPRUN_HOROVOD_VARIABLES``; once a program turns out to be an IPU program
(popdist_launcher.compat.ipu_program), those names leave ``os.environ`` but stay in the
process's C environment, where Horovod's core reads them, so ``ipu.horovod`` and ``hvd.init()``
still work on every backend. Variables the user exported (``-x``) stay visible, and so does
everything in an elastic Horovod job, whose Python side reads ``HOROVOD_ELASTIC``. Plain
Horovod programs keep horovodrun's environment. Standard library only (the site hook loads it).
"""
from __future__ import annotations

import os
from typing import Dict, Optional

from popdist_launcher.wire import contract

_hidden: Dict[str, str] = {}


def hide_launcher_horovod_variables(_module=None) -> None:
    """Hook as an IPU program's NumPy or TensorFlow imports: take the launcher's HOROVOD_*
    variables out of ``os.environ``, keeping them for Horovod's core."""
    names = os.environ.get(contract.HOROVOD_VARIABLES, "")
    if not names or os.environ.get("HOROVOD_ELASTIC") == "1":
        return
    for name in names.split(","):
        value = os.environ.pop(name, None)
        if value is not None:
            _hidden[name] = value
            os.putenv(name, value)  # for Horovod's core (getenv), not for the program


def launch_variable(name: str) -> Optional[str]:
    """``name`` as the launcher set it, whether or not the program sees it."""
    return os.environ.get(name, _hidden.get(name))
