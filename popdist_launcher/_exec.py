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

``--watch-parent`` (under mpirun and srun): the program runs as a child in this process's own
process group, which the engine made for the rank and signals as a whole (so the program and
anything it starts get the engine's signals directly; this process only waits them out). If the
engine process that started this one dies (killed with the launcher), the whole group is killed.
The program's death by a signal is re-raised, so the engine reports the signal, not a code.

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


# What an engine (mpirun, srun) may send a rank's process group: the program gets it with the
# group; the wrapper waits for the program instead of dying first.
ENGINE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGUSR2, signal.SIGALRM)


def _watch_parent(argv: List[str]) -> int:
    """Run the program in this process group until it ends; kill the group if the parent dies."""
    parent = os.getppid()
    for sig in ENGINE_SIGNALS:
        signal.signal(sig, lambda s, f: None)
    child = _start(argv)  # the handlers above are Python's: the program gets the defaults
    try:  # the group to kill: this rank's own, never one shared with the engine
        own_group = os.getpgid(0) != os.getpgid(parent)
    except ProcessLookupError:
        own_group = os.getpgid(0) == os.getpid()

    def kill_all() -> None:
        if own_group:
            os.killpg(0, signal.SIGKILL)
        _killpg(child.pid, signal.SIGKILL)  # a group of the program's own, if it made one
        child.kill()

    sel = selectors.DefaultSelector()
    sel.register(os.pidfd_open(child.pid), selectors.EVENT_READ, "exit")
    try:
        sel.register(os.pidfd_open(parent), selectors.EVENT_READ, "parent")
    except ProcessLookupError:
        kill_all()
    if os.getppid() != parent:  # the parent died before it could be watched
        kill_all()
    while True:
        for key, _ in sel.select():
            if key.data == "parent":  # the engine is gone: nothing may outlive it
                sel.unregister(key.fileobj)
                kill_all()
                continue
            code = child.wait()
            if code < 0:
                _die_by(-code)
            return code


def _start(argv: List[str], **popen) -> subprocess.Popen:
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, **popen)
    except OSError as exc:
        _fail(f"could not start {argv[0]!r} on {os.uname().nodename}: {exc.strerror or exc}.",
              126 if isinstance(exc, PermissionError) else 127)


def _supervise(argv: List[str]) -> int:
    """--control: the program in its own process group; stdin is the launcher's channel."""
    child = _start(argv, process_group=0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: _killpg(child.pid, s))
    pidfd = os.pidfd_open(child.pid)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "control")
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    while True:
        for key, _ in sel.select():
            if key.data == "exit":
                code = child.wait()
                _killpg(child.pid, signal.SIGKILL)  # what is left of its group goes with it
                return 128 - code if code < 0 else code
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
        return _watch_parent(argv)
    if not control:
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            _fail(f"could not start {argv[0]!r} on {os.uname().nodename}: {exc.strerror or exc}.")
    os.write(2, STARTED_MARKER)
    return _supervise(argv)


if __name__ == "__main__":
    sys.exit(main())
