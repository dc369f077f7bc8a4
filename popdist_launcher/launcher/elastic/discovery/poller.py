"""The host discovery script every second, in a child process (``Poller``, see
``discovery/poll.py``), its answers read without blocking; one run is ``discovery/script.py``'s.
A job without a script has fixed hosts (``FixedHosts``: the same calls, and nothing to run).

Standard library only: this runs in the launcher, which never imports Horovod.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Callable, List, NamedTuple, Optional, Protocol

from popdist_launcher.launcher.elastic.discovery.script import Hosts, describe_exit
from popdist_launcher.launcher.supervision.processes import signal_group

# An Answer's kind besides DiscoveryError's: a good answer, the discovery process ended.
OK, POLLER = "ok", "poller"
POLLER_MODULE = "popdist_launcher.launcher.elastic.discovery.poll"
POLLER_STOP_GRACE_SECONDS = 5.0


class Answer(NamedTuple):
    """One run of the discovery script: its hosts (kind "ok"), or the error sentence and its
    kind (a DiscoveryError kind, or "poller" when the discovery process itself ended)."""
    hosts: Optional[Hosts]
    error: Optional[str]
    kind: str


Register = Callable[[Any, Callable[[], None]], None]  # a selector's watch(fileobj, handler)


class HostSource(Protocol):
    """Where an elastic job's hosts come from: started once, watched by an event loop (its
    ``register``), read when it has answers, closed at the end."""

    def start(self) -> None: ...

    def watch(self, register: Register, handler: Callable[[], None]) -> None: ...

    def read(self) -> List[Answer]: ...

    def close(self) -> None: ...


class FixedHosts:
    """The hosts of a job without a discovery script: they never change, so nothing runs, nothing
    is watched and nothing is ever answered."""

    def start(self) -> None:
        pass

    def watch(self, register: Register, handler: Callable[[], None]) -> None:
        pass

    def read(self) -> List[Answer]:
        return []

    def close(self) -> None:
        pass


class Poller:
    """Runs the discovery script every ``interval`` seconds in a child process (its own process
    group; see ``discovery/poll.py``) and hands its answers over a non-blocking pipe.

    Register :meth:`fileno` in a selector and call :meth:`read` when it is readable. The child
    ends by itself when this process dies. If the child ends otherwise (someone killed it), the
    pipe reads EOF: :meth:`read` reports it (kind "poller") and starts a new child writing into
    the same pipe, so :meth:`fileno` and a selector's registration stay valid.
    """

    def __init__(self, script: str, slots_per_host: int, interval: float = 1.0,
                 timeout: float = 10.0) -> None:
        self.script = script
        self.slots_per_host = slots_per_host
        self.interval = interval
        self.timeout = timeout
        self._proc: Optional[subprocess.Popen] = None
        self._r = -1
        self._buffer = b""

    def start(self) -> None:
        self._r, w = os.pipe()
        os.close(w)
        os.set_blocking(self._r, False)
        self._spawn()

    def _spawn(self) -> None:
        self._buffer = b""
        # A new write end of the same pipe (Linux: a pipe opens like a FIFO through /proc).
        w = os.open(f"/proc/self/fd/{self._r}", os.O_WRONLY)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", POLLER_MODULE, self.script, str(self.slots_per_host),
                 repr(float(self.interval)), repr(float(self.timeout))],
                stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            os.close(w)

    def watch(self, register: Register, handler: Callable[[], None]) -> None:
        """Have an event loop call ``handler`` when answers arrive (``register`` is its
        ``watch``)."""
        register(self, handler)

    @property
    def pid(self) -> Optional[int]:
        """The discovery process's pid (and process group id), None before start()."""
        return self._proc.pid if self._proc else None

    def fileno(self) -> int:
        return self._r

    def read(self) -> List[Answer]:
        """The answers that arrived since the last call (never blocks; [] when none)."""
        chunks = [self._buffer]
        ended = False
        while True:
            try:
                data = os.read(self._r, 65536)
            except BlockingIOError:
                break
            if not data:
                ended = True
                break
            chunks.append(data)
        *lines, self._buffer = b"".join(chunks).split(b"\n")
        answers = [_answer(json.loads(line)) for line in lines if line]
        if ended and self._proc is not None:
            self._proc.wait()
            ended = describe_exit(self._proc.returncode)
            answers.append(Answer(None, f"the host discovery process (pid {self._proc.pid}) "
                                        f"{ended}; started a new one.",
                                  POLLER))
            self._spawn()
        return answers

    def close(self) -> None:
        """Stop the discovery process and the script it is running; reap it; close the pipe.

        SIGTERM first: the child kills its script's process group (its own session) and exits;
        SIGKILL to its group after a grace period."""
        proc, self._proc = self._proc, None
        if proc is not None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(POLLER_STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            signal_group(proc.pid, signal.SIGKILL)
        if self._r >= 0:
            os.close(self._r)
        self._r = -1


def _answer(frame: dict) -> Answer:
    if "hosts" in frame:
        return Answer([(host, slots) for host, slots in frame["hosts"]], None, OK)
    return Answer(None, frame["error"], frame["kind"])
