"""The vocabulary of one attempt: the job's and each instance's states and their transitions,
an attempt's result and failure, the processes the launcher started, and the open-world hooks
of an elastic job; ``supervisor.py`` moves them."""
from __future__ import annotations

import collections
import enum
import os
import subprocess
from typing import Callable, Deque, Dict, NamedTuple, Optional

from popdist_launcher.launcher import report
from popdist_launcher.launcher.backends.base import Launch
from popdist_launcher.launcher.hub import Conn


class JobState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    DRAINING = "draining"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # ended on the launcher's request (request_stop): an elastic re-plan


FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED, JobState.STOPPED)
TRANSITIONS = {
    JobState.STARTING: (JobState.RUNNING, JobState.STOPPING, JobState.DRAINING),
    JobState.RUNNING: (JobState.STOPPING, JobState.DRAINING),
    JobState.STOPPING: (JobState.DRAINING,),
    JobState.DRAINING: FINAL,
}


class InstanceState(enum.Enum):
    PENDING = "pending"      # its wrapper has not connected yet
    CONNECTED = "connected"  # the wrapper has its spec; the program is being started
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"            # the wrapper went away without an exit status (or never came)


class JobResult(NamedTuple):
    state: JobState
    exit_code: int
    failed_instance: Optional[int]
    signal_received: Optional[int]


class Failure(NamedTuple):
    cause: report.Cause
    exit_code: int
    kind: str  # "instance", "engine", "start-timeout", "timeout", "lost"


class Instance:
    __slots__ = ("index", "host", "state", "pid", "returncode", "conn", "stopped", "launch",
                 "name", "env", "start_by", "kill_at", "killed")

    def __init__(self, index: int, host: str, name: str = "") -> None:
        self.index = index
        self.host = host
        self.name = name  # "evaluator" for --evaluator's process (index num_instances)
        self.state = InstanceState.PENDING
        self.pid: Optional[int] = None
        self.returncode: Optional[int] = None
        self.conn: Optional[Conn] = None
        self.stopped = False  # the launcher sent it a stopping signal
        self.launch: Optional["Started"] = None
        # open world only: its environment, and its own start and kill deadlines
        self.env: Optional[Dict[str, str]] = None
        self.start_by: Optional[float] = None
        self.kill_at: Optional[float] = None
        self.killed = False  # SIGKILL sent by its own kill deadline

    @property
    def settled(self) -> bool:
        return self.state in (InstanceState.EXITED, InstanceState.LOST)

    @property
    def who(self) -> str:
        return self.name or f"instance {self.index}"


class Started:
    """A process the launcher started: an engine, or a wrapper it forked."""

    def __init__(self, launch: Launch, pid: int, popen: Optional[subprocess.Popen]) -> None:
        self.launch = launch
        self.pid = pid
        self.popen = popen
        self.pidfd = os.pidfd_open(pid)
        self.returncode: Optional[int] = None
        self.lines: Deque[str] = collections.deque(maxlen=20)
        self.partial: Dict[int, bytes] = {}

    @property
    def engine(self) -> bool:
        return self.popen is not None


class OpenWorld(NamedTuple):
    """An open-world job (Horovod elastic): instances are added while it runs
    (``Supervisor.add_instance``), and their ends are reported instead of ending the job.

    ``on_end(inst, how, detail)``: ``how`` is "exited" (``inst.returncode`` says how), "lost"
    (its wrapper's connection ended without an exit status, or its host stopped answering),
    "start-failed" (its engine or the start timeout ended it before it ran) or "not-started";
    exactly one call per instance. ``on_stopping()``: the whole job begins to stop (a signal,
    ``--timeout``, ``request_stop``), before any instance is signalled. ``remote``: instances may
    be started on other hosts (the launcher listens on TCP too)."""

    on_end: Callable[[Instance, str, str], None]
    on_stopping: Callable[[], None]
    remote: bool = False
