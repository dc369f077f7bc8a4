"""The processes one attempt starts (wrappers forked on this host, engines such as mpirun, srun or
ssh, Horovod's rendezvous helper): started, their lines shown, reaped, killed at the end."""
from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
from typing import Callable, List, Optional, Tuple

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.supervision import processes
from popdist_launcher.launcher.supervision.attempt import Started
from popdist_launcher.launcher.layout.backends.base import Launch
from popdist_launcher.launcher.layout.plan import LaunchPlan
from popdist_launcher.wire import rendezvous


class Spawner:
    """Selector keys: ``("exit", started)`` (its pidfd), ``("engine-out", started)`` (an engine's
    stdout and stderr) and ``("rendezvous",)`` (the first Horovod rendezvous connection)."""

    def __init__(self, sel: selectors.BaseSelector,
                 rendezvous_socket: Optional[socket.socket] = None,
                 show_line: Optional[Callable[[str, str], None]] = None) -> None:
        """``show_line(label, text)`` shows an engine's line (default: on the console)."""
        self.sel = sel
        self._show_line = show_line or (lambda label, text: console.write(f"[{label}]: {text}"))
        self.started: List[Started] = []
        self._watchdog: Optional[processes.Watchdog] = None
        self._rendezvous_socket = rendezvous_socket
        self._rendezvous_proc: Optional[subprocess.Popen] = None

    def _watched(self) -> processes.Watchdog:
        if self._watchdog is None:
            self._watchdog = processes.Watchdog()
        return self._watchdog

    def remove_if_killed(self, folder: str) -> None:
        """The watchdog removes ``folder`` (the launcher's socket folder, an engine's scratch)
        should the launcher die before it does."""
        self._watched().remove_if_killed(folder)

    def fork(self, launch: Launch, spec: dict) -> Tuple[Started, socket.socket]:
        """A wrapper on this host: a fork of the launcher running the wrapper's code with
        ``spec``; gives its process and the launcher's end of its connection."""
        # Here, not at the top: only local wrappers need it (mpi's run as their own processes).
        from popdist_launcher.launcher.spawned import program, wrapper
        program.prctl()  # loads libc before the fork, not once per child
        parent, child = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the wrapper: nothing of the launcher's may run here
            code = 1
            try:
                import gc
                gc.disable()  # the launcher's objects are never collected here (their fds are
                # closed below), and their pages stay shared with the launcher's
                signal.set_wakeup_fd(-1)
                os.setpgid(0, 0)
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                code = wrapper.serve(child, spec, forked=True)
            finally:
                os._exit(code)
        child.close()
        started = Started(launch, pid, None)
        self._track(started)
        return started, parent

    def spawn(self, launch: Launch) -> Started:
        """An engine, in its own process group, watched by the watchdog (OSError when it cannot
        be started)."""
        console.debug("starting %s: %s", launch.label, " ".join(launch.argv))
        if launch.scratch is not None:
            os.mkdir(launch.scratch, 0o700)
        try:
            popen = subprocess.Popen(
                list(launch.argv), env=launch.env, stdin=subprocess.PIPE if launch.stdin else
                subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                process_group=0, close_fds=True)
        except OSError:
            if launch.scratch is not None:
                shutil.rmtree(launch.scratch, ignore_errors=True)
            raise
        self._watched().watch(popen.pid)
        if launch.scratch is not None:
            self.remove_if_killed(launch.scratch)
        started = Started(launch, popen.pid, popen)
        self._track(started)
        if launch.stdin:
            try:
                popen.stdin.write(launch.stdin)
                popen.stdin.close()
            except OSError:
                pass
        for fd in (popen.stdout.fileno(), popen.stderr.fileno()):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, ("engine-out", started))
        return started

    def _track(self, started: Started) -> None:
        self.started.append(started)
        self.sel.register(started.pidfd, selectors.EVENT_READ, ("exit", started))

    def output(self, fd: int, started: Started) -> bool:
        """Show and keep an engine's own lines; False once nothing more can be read now."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            rest = started.partial.pop(fd, b"")
            if rest:
                self._lines(started, [rest])
            return False
        data = started.partial.pop(fd, b"") + data
        lines = data.split(b"\n")
        if lines[-1]:
            started.partial[fd] = lines[-1]
        self._lines(started, lines[:-1])
        return True

    def last_words(self, started: Started) -> None:
        """Read what an ended engine still has to say (for the failure report)."""
        for fd in (started.popen.stdout.fileno(), started.popen.stderr.fileno()):
            while fd in self.sel.get_map() and self.output(fd, started):
                pass

    def _lines(self, started: Started, lines: List[bytes]) -> None:
        label = started.launch.label
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip("\r")
            started.lines.append(text)
            self._show_line(label, text)

    def reap(self, started: Started, block: bool = False) -> None:
        """Collect its exit status (at once, or when ``block``, waiting for it)."""
        if started.returncode is not None:
            return
        try:
            pid, status = os.waitpid(started.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = started.pid, 0
        if pid == 0:
            return
        started.returncode = os.waitstatus_to_exitcode(status)
        if started.popen is not None:
            started.popen.returncode = started.returncode
        self.sel.unregister(started.pidfd)
        os.close(started.pidfd)
        if self._watchdog is not None and started.engine:
            self._watchdog.forget(started.pid)

    def kill_engines(self, which: Callable[[Launch], bool] = lambda launch: True) -> None:
        """SIGKILL to the process group of every engine still running (of ``which`` launches)."""
        for started in self.started:
            if started.engine and started.returncode is None and which(started.launch):
                processes.signal_group(started.pid, signal.SIGKILL)

    def kill_all(self) -> None:
        """SIGKILL to every process group still running, and reap them."""
        for started in self.started:
            if started.returncode is None:
                processes.signal_group(started.pid, signal.SIGKILL)
                self.reap(started, block=True)

    def end(self) -> None:
        """The attempt is over: kill and reap whatever still runs, close the engines' pipes."""
        for started in self.started:
            if started.returncode is None:
                processes.signal_group(started.pid, signal.SIGKILL)
                if not started.engine:
                    try:
                        os.kill(started.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.reap(started, block=True)
            if started.popen is not None:
                for pipe in (started.popen.stdout, started.popen.stderr):
                    pipe.close()
            if started.launch.scratch is not None:
                shutil.rmtree(started.launch.scratch, ignore_errors=True)

    def close(self) -> None:
        """Last: the rendezvous socket or helper, and the watchdog."""
        if self._rendezvous_socket is not None:
            self._rendezvous_socket.close()
        if self._rendezvous_proc is not None:
            self._rendezvous_proc.stdin.close()
            try:
                self._rendezvous_proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                processes.signal_group(self._rendezvous_proc.pid, signal.SIGKILL)
                self._rendezvous_proc.wait()
        if self._watchdog is not None:
            self._watchdog.close()

    # ---- rendezvous --------------------------------------------------------------------------
    def await_rendezvous(self) -> None:
        """Start Horovod's rendezvous helper at the first connection to its socket."""
        if self._rendezvous_socket is not None:
            self.sel.register(self._rendezvous_socket, selectors.EVENT_READ, ("rendezvous",))

    def start_rendezvous(self, plan: LaunchPlan) -> None:
        sock = self._rendezvous_socket
        self.sel.unregister(sock)
        slots = json.dumps(plan.horovod_slots(), separators=(",", ":"))
        allowed = json.dumps(sorted({h.address for h in plan.hosts}))
        console.debug("first rendezvous connection: starting Horovod's rendezvous server")
        self._rendezvous_proc = subprocess.Popen(
            [sys.executable, "-m", "popdist_launcher.wire.rendezvous",
             str(sock.fileno()), slots,
             allowed],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(sock.fileno(),),
            process_group=0, close_fds=True,
            env={**os.environ, rendezvous.SECRET_ENV: plan.rendezvous_secret})
        sock.close()  # the helper owns it now; if it dies, clients see a reset, not a hang
        self._rendezvous_socket = None
