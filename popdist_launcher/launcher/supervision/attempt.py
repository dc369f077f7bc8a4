"""The vocabulary of one attempt that ``supervisor.py`` moves: the job's and each instance's states
and transitions, how the attempt ends, and the processes the launcher started."""
from __future__ import annotations

import collections
import enum
import os
import signal
import subprocess
from typing import Deque, Dict, Iterable, NamedTuple, Optional

from popdist_launcher.launcher.output import report
from popdist_launcher.launcher.layout.backends.base import Launch
from popdist_launcher.launcher.supervision.hub import Conn

UNRESPONSIVE_SECONDS = 5.0  # after SIGKILL was sent, a wrapper that still has not answered
TIMEOUT_EXIT_CODE = 124     # as timeout(1)


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
    kind: str  # "instance", "engine", "start-timeout", "timeout", "lost", "host-lost", "hung"


class Outcome:
    """What decided how the attempt ends: the first failure, a stopping signal or the launcher's
    own request to stop (``Supervisor.request_stop``); none of them: it succeeded."""

    def __init__(self) -> None:
        self.failure: Optional[Failure] = None
        self.signal: Optional[int] = None
        self.stop_reason: Optional[str] = None

    @property
    def decided(self) -> bool:
        return self.failure is not None or self.signal is not None or \
            self.stop_reason is not None

    @property
    def state(self) -> JobState:
        """The job's final state."""
        if self.failure is not None:
            return JobState.FAILED
        if self.signal is not None:
            return JobState.INTERRUPTED
        return JobState.STOPPED if self.stop_reason is not None else JobState.SUCCEEDED

    def engine_failed_to_start(self, instances: Iterable["Instance"],
                               transients: Iterable[str]) -> bool:
        """Whether an engine failed, by one of its known start-up ``transients``, before any of
        ``instances`` started (nothing of the user's program ran)."""
        failure = self.failure
        if failure is None or failure.kind != "engine" or self.signal is not None:
            return False
        if any(i.pid is not None for i in instances):
            return False
        return any(t in line for line in failure.cause.engine_lines for t in transients)

    def result(self) -> JobResult:
        failure = self.failure
        if failure is not None:
            return JobResult(JobState.FAILED, failure.exit_code, failure.cause.instance,
                             self.signal)
        if self.signal is not None:
            return JobResult(JobState.INTERRUPTED, 128 + self.signal, None, self.signal)
        return JobResult(self.state, 0, None, None)


# Each instance's: PENDING -> CONNECTED -> RUNNING -> EXITED, or LOST on the way.
INSTANCE_TRANSITIONS = {
    InstanceState.PENDING: (InstanceState.CONNECTED, InstanceState.EXITED, InstanceState.LOST),
    InstanceState.CONNECTED: (InstanceState.RUNNING, InstanceState.EXITED, InstanceState.LOST),
    InstanceState.RUNNING: (InstanceState.EXITED, InstanceState.LOST),
    # lost by its engine's end (before it started), then its wrapper's exit status was read
    InstanceState.LOST: (InstanceState.EXITED,),
}


class Instance:
    __slots__ = ("index", "host", "_state", "pid", "returncode", "conn", "stopped", "launch",
                 "name", "progress", "hung")

    def __init__(self, index: int, host: str, name: str = "") -> None:
        self.index = index
        self.host = host
        self.name = name  # "evaluator" for --evaluator's process (index num_instances)
        self._state = InstanceState.PENDING
        self.pid: Optional[int] = None
        self.returncode: Optional[int] = None
        self.conn: Optional[Conn] = None
        self.stopped = False  # the launcher sent it a stopping signal
        self.launch: Optional["Started"] = None
        self.progress: Optional[int] = None  # the highest step its program reported
        self.hung = ""  # why the launcher found it hung (--hang-timeout), if it did

    @property
    def state(self) -> InstanceState:
        return self._state

    def to(self, state: InstanceState) -> None:
        """The one way an instance's state changes (INSTANCE_TRANSITIONS)."""
        if state is self._state:
            return
        if state not in INSTANCE_TRANSITIONS.get(self._state, ()):
            raise AssertionError(f"{self.who} state {self._state.value} -> {state.value}")
        self._state = state

    @property
    def settled(self) -> bool:
        return self._state in (InstanceState.EXITED, InstanceState.LOST)

    @property
    def who(self) -> str:
        return self.name or f"instance {self.index}"

    def kill_forked_program(self) -> None:
        """Its wrapper, forked on this host, is gone: its program's process group (not a reused
        pid) goes too."""
        if self.pid is not None and self.launch is not None and not self.launch.engine:
            try:
                if os.getpgid(self.pid) == self.pid:
                    os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def end(self) -> report.InstanceEnd:
        """How it ended, as the failure report tells it."""
        how = {InstanceState.LOST: "lost", InstanceState.EXITED: "exited"}.get(
            self._state, "not started")
        if self._state is InstanceState.EXITED and self.returncode is None:
            how = "not started"
        if how == "exited" and self.stopped and self.returncode != 0:
            how = "stopped"
        if self._state is InstanceState.LOST and self.pid is None:
            how = "not started"
        return report.InstanceEnd(self.index, self.host, self.pid, self.returncode, how,
                                  self.name)


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
