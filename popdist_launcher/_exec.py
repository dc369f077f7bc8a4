"""What runs on a remote host (or under mpirun/srun) in front of the user's program.

    python -m popdist_launcher._exec [--cwd DIR] [--rank-from VAR] [--control] -- PROGRAM ARGS...

``--rank-from VAR``: the instance's own variables are picked from POPRUN_INSTANCE_ENVS (a JSON
list, one object per instance) by the rank in VAR (OMPI_COMM_WORLD_RANK, SLURM_PROCID): mpirun
and srun give every process the same environment, the launcher gives each instance its own.

``--control``: stdin is the launcher's control channel (an ssh session). The program runs in its
own process group with stdin from /dev/null; each byte read from stdin is a signal number to send
to that group; end of file (the launcher or its ssh connection died) kills the group. The first
line on stderr is a start marker the launcher strips, so it knows the host came up. The exit
status is the program's, 128+N for death by signal N.

``--watch-parent`` (under mpirun and srun): the program runs in its own process group; the
signals the engine sends are passed on to that group; if the engine process that started this one
dies (killed with the launcher), the group is killed. The program's death by a signal is
re-raised, so the engine reports the signal, not a code.

Imports only the standard library: it starts once per instance.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from typing import List, Optional

INSTANCE_ENVS = "POPRUN_INSTANCE_ENVS"
STARTED_MARKER = b"\x00poprun-lite: started\n"


def _fail(message: str, code: int = 127) -> "NoReturn":  # noqa: F821
    sys.stderr.write(f"poprun-lite: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


def _apply_rank_env(rank_var: str) -> None:
    raw = os.environ.pop(INSTANCE_ENVS, None)
    rank = os.environ.get(rank_var)
    if raw is None or rank is None or not rank.isdigit():
        _fail(f"cannot tell which instance this is: {rank_var}={rank!r} and {INSTANCE_ENVS} "
              f"{'is' if raw else 'is not'} set; start it through poprun-lite.")
    envs = json.loads(raw)
    if int(rank) >= len(envs):
        _fail(f"{rank_var}={rank} but the job has {len(envs)} instances; the process count of "
              f"the engine does not match -np.")
    os.environ.update(envs[int(rank)])


# What an engine (mpirun, srun) may send an instance, passed on to the program's group.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGALRM, signal.SIGCONT)


def _supervise(argv: List[str], control: bool) -> int:
    """Run the program in its own process group until it ends; ``control``: stdin is the
    launcher's channel (see above), else the parent process is watched instead."""
    parent = os.getppid()
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, process_group=0)
    except OSError as exc:
        _fail(f"could not start {argv[0]!r} on {os.uname().nodename}: {exc.strerror or exc}.",
              126 if isinstance(exc, PermissionError) else 127)
    for sig in ((signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if control else FORWARDED):
        signal.signal(sig, lambda s, f: _killpg(child.pid, s))
    sel = selectors.DefaultSelector()
    sel.register(os.pidfd_open(child.pid), selectors.EVENT_READ, "exit")
    if control:
        sel.register(0, selectors.EVENT_READ, "control")
    else:
        try:
            sel.register(os.pidfd_open(parent), selectors.EVENT_READ, "parent")
        except ProcessLookupError:  # gone already
            _killpg(child.pid, signal.SIGKILL)
    while True:
        for key, _ in sel.select():
            if key.data == "exit":
                code = child.wait()
                _killpg(child.pid, signal.SIGKILL)  # what is left of its group goes with it
                if code < 0 and not control:
                    _die_by(-code)
                return 128 - code if code < 0 else code
            if key.data == "parent":  # the engine is gone: nothing may outlive it
                sel.unregister(key.fileobj)
                _killpg(child.pid, signal.SIGKILL)
                continue
            data = os.read(0, 64)
            if not data:  # the launcher is gone: nothing may outlive it
                sel.unregister(0)
                _killpg(child.pid, signal.SIGKILL)
                continue
            for signum in data:
                _killpg(child.pid, signum)


def _die_by(signum: int) -> None:
    """End this process by ``signum``, as the program did."""
    sys.stdout.flush()
    sys.stderr.flush()
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is to go on (SIGCHLD, SIGCONT...)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(args: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    cwd = rank_var = None
    control = watch_parent = False
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--cwd":
            cwd = args.pop(0)
        elif flag == "--rank-from":
            rank_var = args.pop(0)
        elif flag == "--control":
            control = True
        elif flag == "--watch-parent":
            watch_parent = True
        else:
            _fail(f"internal: unknown _exec option {flag!r}.", 2)
    argv = args[1:]
    if not argv:
        _fail("internal: _exec needs -- PROGRAM.", 2)
    if rank_var:
        _apply_rank_env(rank_var)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as exc:
            _fail(f"working directory {cwd!r} does not exist on {os.uname().nodename} "
                  f"({exc.strerror}); run poprun-lite from a directory every host has.")
    if watch_parent and not control:
        return _supervise(argv, control=False)
    if not control:
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            _fail(f"could not start {argv[0]!r} on {os.uname().nodename}: {exc.strerror or exc}.")
    os.write(2, STARTED_MARKER)
    return _supervise(argv, control=True)


if __name__ == "__main__":
    sys.exit(main())
