"""An instance's Python stacks for the launcher: at interpreter start (``compat/startup.py``) the
program started by poprun-lite's wrapper registers faulthandler on the wrapper's dump signal,
writing every thread's stack to a pipe the wrapper reads; the collectives' stall watchdog asks
the launcher, through the same pipe, for every instance's stacks; and the program's training
progress (``report_progress``) and its whereabouts for the hang check (``whereabouts.py``) go
to the launcher the same way.

Standard library only (and the pipe's spelling, ``wire/stack_pipe.py``, which imports nothing),
and no typing (35 ms): it runs in every Python process that has POPRUN_STACK_FD set.
"""
from __future__ import annotations

import os

from popdist_launcher.wire.stack_pipe import FD_ENV as ENV
from popdist_launcher.wire.stack_pipe import PROGRESS, READY, STALL, WHEREABOUTS_ENV

_found = {}  # pid -> _ours() (a forked child asks again: it is not the wrapper's program)


def _ours() -> "tuple[int, int] | None":
    """(pipe fd, dump signal) when this process is the program a wrapper started, else None
    (a process the program started sees the variable too, but not the wrapper as parent)."""
    value = os.environ.get(ENV, "")
    try:
        fd, wrapper_pid, signum = (int(part) for part in value.split(":"))
    except ValueError:
        return None
    return (fd, signum) if os.getppid() == wrapper_pid else None


def register_from_environ() -> None:
    """Dump every thread's stack to the wrapper's pipe when the wrapper's signal arrives."""
    found = _ours()
    if found is None:
        return
    fd, signum = found
    import faulthandler
    try:
        os.set_inheritable(fd, False)
        faulthandler.register(signum, file=fd, all_threads=True, chain=False)
        os.write(fd, READY)
    except (OSError, ValueError, RuntimeError):
        return
    if os.environ.get(WHEREABOUTS_ENV, "1") != "0":  # the hang check's sampler (whereabouts.py)
        from popdist_launcher.whereabouts import start
        start(fd)


def report_stall(message: str) -> None:
    """Write this instance's stacks and ask the launcher for every instance's (a stall)."""
    found = _ours()
    if found is None:
        return
    fd, _ = found
    import faulthandler
    try:
        faulthandler.dump_traceback(file=fd, all_threads=True)
        os.write(fd, STALL + message.replace("\n", " ").replace("\0", " ").encode()[:4000] + b"\n")
    except (OSError, ValueError):
        pass


def report_progress(step: int) -> None:
    """Tell the launcher that training advanced to ``step`` (nothing outside poprun-lite)."""
    pid = os.getpid()
    if pid not in _found:
        _found[pid] = _ours()
    found = _found[pid]
    if found is None:
        return
    try:
        os.write(found[0], PROGRESS + str(int(step)).encode() + b"\n")
    except (OSError, ValueError):
        pass
