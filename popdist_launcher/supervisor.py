"""The supervisor: starts a plan's instances through a backend, watches them, and ends the job.

A small state machine (STARTING -> RUNNING -> STOPPING -> SUCCEEDED | FAILED | INTERRUPTED) over
one event loop: instance output pipes, pidfds that become readable when an instance exits, the
signal wakeup socket, and the rendezvous socket. The first instance to exit non-zero ends the
job: the others get SIGTERM, then SIGKILL after the grace period, and the launcher exits with
that instance's code. Signals sent to the launcher are forwarded to every instance's group.
"""
from __future__ import annotations

import enum
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, NamedTuple, Optional

from popdist_launcher import procs
from popdist_launcher._exec import STARTED_MARKER
from popdist_launcher._say import debug
from popdist_launcher.backends.base import Backend
from popdist_launcher.plan import LaunchPlan

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DRAIN_SECONDS = 2.0  # how long to wait for output pipes held open by escaped grandchildren


class JobState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class JobResult(NamedTuple):
    state: JobState
    exit_code: int
    failed_instance: Optional[int]
    signal_received: Optional[int]
    returncodes: Dict[int, Optional[int]]


class Supervisor:
    def __init__(self, plan: LaunchPlan, backend: Backend, output: procs.OutputOptions,
                 rendezvous_socket: Optional[socket.socket] = None,
                 say: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
                 on_started: Optional[Callable[[], None]] = None) -> None:
        self.plan = plan
        self.backend = backend
        self.router = procs.OutputRouter(plan.num_instances, output)
        self.say = say
        self.state = JobState.STARTING
        self.instances: List[procs.Instance] = []
        self._rendezvous_socket = rendezvous_socket
        self._rendezvous_proc: Optional[subprocess.Popen] = None
        self._on_started = on_started
        self._sel = selectors.DefaultSelector()
        self._streams = 0
        self._failed: Optional[int] = None
        self._signal: Optional[int] = None
        self._kill_deadline: Optional[float] = None
        self._drain_deadline: Optional[float] = None
        self._watchdog: Optional[procs.Watchdog] = None
        self._start_exit_code = 1  # for an instance that never started
        self._start_deadline: Optional[float] = None  # remote sessions not yet up by then fail
        self._marker_pending: Dict[int, bytes] = {}
        # An engine backend (mpirun, srun) is one process that starts every instance itself and
        # tags each output line with the instance; its own lines are kept for failure reports.
        self._engine = bool(getattr(backend, "engine", False))
        self._engine_partial: Dict[str, bytes] = {}
        self._engine_lines: List[str] = []
        self._engine_failure: Optional[int] = None
        self._engine_instance_output = False

    # ---- public -------------------------------------------------------------------------
    def run(self) -> JobResult:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        previous = {s: signal.signal(s, _ignore) for s in FORWARDED_SIGNALS}
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self._sel.register(wake_r, selectors.EVENT_READ, ("signal",))
        self._watchdog = procs.Watchdog()
        try:
            self._start_all()
            self._loop()
        finally:
            self._cleanup()
            signal.set_wakeup_fd(old_wakeup)
            for s, handler in previous.items():
                signal.signal(s, handler)
            wake_r.close()
            wake_w.close()
        return self._result()

    # ---- starting -----------------------------------------------------------------------
    def _start_all(self) -> None:
        deadline = time.monotonic() + self.plan.start_timeout
        inherited = os.environ
        for index in range(1 if self._engine else self.plan.num_instances):
            argv = self.backend.command(self.plan, index)
            env = self.backend.environment(self.plan, index, inherited)
            control = self.backend.uses_control_channel(self.plan, index)
            debug("starting instance %d: %s", index, " ".join(argv))
            try:
                inst = procs.start_instance(index, argv, env, control=control)
            except OSError as exc:
                self.say(f"poprun-lite: instance {index} could not start {argv[0]!r}: "
                         f"{exc.strerror or exc}.")
                self._failed = index
                self._fail_start(exit_code=126 if isinstance(exc, PermissionError) else 127)
                return
            self._watchdog.watch(inst.pid)
            self.instances.append(inst)
            self._sel.register(inst.pidfd, selectors.EVENT_READ, ("exit", inst))
            for stream, pipe in ((procs.STDOUT, inst.proc.stdout), (procs.STDERR, inst.proc.stderr)):
                os.set_blocking(pipe.fileno(), False)
                kind = "engine" if self._engine else "out"
                self._sel.register(pipe, selectors.EVENT_READ, (kind, index, stream))
                self._streams += 1
            if time.monotonic() > deadline and not self._engine:
                missing = ", ".join(str(i) for i in range(index + 1, self.plan.num_instances))
                self.say(f"poprun-lite: start timeout ({self.plan.start_timeout:g} s) expired "
                         f"before instances {missing} started; raise --start-timeout.")
                self._failed = index
                self._fail_start(exit_code=124)
                return
        if self._rendezvous_socket is not None:
            self._sel.register(self._rendezvous_socket, selectors.EVENT_READ, ("rendezvous",))
        if not all(i.started for i in self.instances):
            self._start_deadline = deadline
        self.state = JobState.RUNNING
        if self._on_started:
            self._on_started()

    def _fail_start(self, exit_code: int) -> None:
        self._start_exit_code = exit_code
        self._begin_stop()

    # ---- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        while any(i.alive for i in self.instances) or self._streams:
            now = time.monotonic()
            if not any(i.alive for i in self.instances):
                if self._drain_deadline is None:
                    self._drain_deadline = now + DRAIN_SECONDS
                elif now >= self._drain_deadline:
                    break
            if self._kill_deadline is not None and now >= self._kill_deadline:
                self._kill_all(signal.SIGKILL)
                self._kill_deadline = None
            if self._start_deadline is not None and now >= self._start_deadline:
                self._start_deadline = None
                self._on_start_timeout()
            deadlines = [d for d in (self._kill_deadline, self._drain_deadline,
                                     self._start_deadline) if d is not None]
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            for key, _ in self._sel.select(timeout):
                kind = key.data[0]
                if kind in ("out", "engine"):
                    self._read(key)
                elif kind == "exit":
                    self._on_exit(key.data[1])
                elif kind == "signal":
                    self._on_signals(key.fileobj)
                elif kind == "rendezvous":
                    self._start_rendezvous()

    def _read(self, key: selectors.SelectorKey) -> None:
        _, index, stream = key.data
        try:
            data = os.read(key.fd, 65536)
        except BlockingIOError:
            return
        if data and self._engine:
            self._demux(stream, data)
            return
        if data:
            inst = self.instances[index]
            if not inst.started and stream == procs.STDERR:
                data = self._strip_marker(inst, data)
            self.router.feed(index, stream, data)
            return
        self._sel.unregister(key.fileobj)
        key.fileobj.close()
        self._streams -= 1
        if self._engine:
            rest = self._engine_partial.pop(stream, b"")
            if rest:
                self._demux(stream, rest + b"\n")
            for i in range(self.plan.num_instances):
                self.router.close(i, stream)
            return
        self.router.close(index, stream)

    # What Open MPI's launcher says when its own start-up fails now and then for no reason of the
    # job's (a PMIx listener that could not start; seen on loaded CI machines, also elsewhere).
    _ENGINE_START_TRANSIENTS = ("PMIx server's listener thread failed to start",)

    def engine_failed_to_start(self) -> bool:
        """Whether the engine failed by a known start-up transient before any instance wrote a
        line (so nothing of the user's program ran): worth starting once more."""
        return (self._engine and self._signal is None and not self._engine_instance_output
                and any(t in line for line in self._engine_lines
                        for t in self._ENGINE_START_TRANSIENTS))

    def _demux(self, stream: str, data: bytes) -> None:
        """Route the engine's tagged lines to their instances; print and keep its own lines."""
        data = self._engine_partial.pop(stream, b"") + data
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            self._engine_partial[stream] = data[cut:]
        own = []
        for line in data[:cut].splitlines():
            routed = self.backend.demux(line, stream)
            if routed is None:
                text = line.decode("utf-8", "replace")
                self._engine_lines.append(text)
                own.append(line)
            else:
                index, inst_stream, payload = routed
                if 0 <= index < self.plan.num_instances:
                    self._engine_instance_output = True
                    self.router.feed(index, inst_stream, payload + b"\n")
        if own:
            procs.write_all(2, b"".join(b"[" + self.backend.name.encode() + b"]: " + line + b"\n"
                                        for line in own))

    def _strip_marker(self, inst: procs.Instance, data: bytes) -> bytes:
        """Take the remote start marker out of the stream; what comes before it is ssh's own."""
        data = self._marker_pending.pop(inst.index, b"") + data
        at = data.find(STARTED_MARKER)
        if at >= 0:
            inst.started = True
            debug("instance %d is up on %s", inst.index, self.plan.instances[inst.index].host.name)
            if self._start_deadline is not None and all(i.started for i in self.instances):
                self._start_deadline = None
            return data[:at] + data[at + len(STARTED_MARKER):]
        for keep in range(min(len(STARTED_MARKER) - 1, len(data)), 0, -1):
            if STARTED_MARKER.startswith(data[-keep:]):
                self._marker_pending[inst.index] = data[-keep:]
                return data[:-keep]
        return data

    def _on_start_timeout(self) -> None:
        late = [i for i in self.instances if not i.started and i.alive]
        if not late or self.state is JobState.STOPPING:
            return
        hosts = list(dict.fromkeys(self.plan.instances[i.index].host.name for i in late))
        indices = ", ".join(str(i.index) for i in late)
        self.say(f"poprun-lite: start timeout ({self.plan.start_timeout:g} s) expired: host(s) "
                 f"{', '.join(hosts)} never came up (instances {indices}); check that "
                 f"'ssh {hosts[0]} true' answers, or raise --start-timeout.")
        self._failed = late[0].index
        self._fail_start(exit_code=124)

    def _describe(self, inst: procs.Instance, code: int) -> str:
        return (self.backend.explain_exit(self.plan, inst.index, code)
                or procs.describe_exit(code))

    def _on_exit(self, inst: procs.Instance) -> None:
        self._sel.unregister(inst.pidfd)
        code = inst.reap()
        self._watchdog.forget(inst.pid)
        debug("instance %d %s", inst.index, self._describe(inst, code))
        if self._engine:
            self._on_engine_exit(inst, code)
            return
        if code != 0 and self._failed is None and self._signal is None and self.state is not JobState.STOPPING:
            self._failed = inst.index
            others = sum(1 for i in self.instances if i.alive)
            host = self.plan.instances[inst.index].host.name
            self.say(f"poprun-lite: instance {inst.index} {self._describe(inst, code)} (host "
                     f"{host}); stopping the other {others} instance(s).")
            self._begin_stop()

    def _on_engine_exit(self, inst: procs.Instance, code: int) -> None:
        if code != 0 and self._signal is None:
            self._engine_failure = code  # which instance: read from the report once drained

    def _attribute_engine_failure(self) -> None:
        found = self.backend.failed_instance(self._engine_lines)
        if found is None:
            self._failed = 0
            self.say(f"poprun-lite: {self.backend.name} {procs.describe_exit(self._engine_failure)}"
                     f" without naming a failed instance (see its lines above).")
            return
        self._failed, self._engine_failure = found
        host = self.plan.instances[self._failed].host.name
        self.say(f"poprun-lite: instance {self._failed} {procs.describe_exit(self._engine_failure)}"
                 f" (host {host}; {self.backend.name} ended the job).")

    def _on_signals(self, wake: socket.socket) -> None:
        try:
            data = wake.recv(64)
        except BlockingIOError:
            return
        for signum in data:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum not in STOPPING_SIGNALS:
            debug("forwarding %s", name)
            self._kill_all(signum)
            return
        if self.state is JobState.STOPPING and self._signal is not None:
            self.say(f"poprun-lite: {name} again; killing all instances now.")
            self._kill_all(signal.SIGKILL)
            return
        if self._signal is None:
            self._signal = signum
        self.say(f"poprun-lite: received {name}; forwarding it to {self._alive_count()} instance(s) "
                 f"(SIGKILL after {self.plan.grace_period:g} s).")
        self._kill_all(signum)
        self.state = JobState.STOPPING
        self._kill_deadline = time.monotonic() + self.plan.grace_period

    def _begin_stop(self) -> None:
        self.state = JobState.STOPPING
        self._kill_all(signal.SIGTERM)
        self._kill_deadline = time.monotonic() + self.plan.grace_period

    def _kill_all(self, sig: int) -> None:
        for inst in self.instances:
            if inst.alive:
                inst.send_signal(sig)

    def _alive_count(self) -> int:
        return sum(1 for i in self.instances if i.alive)

    # ---- rendezvous ---------------------------------------------------------------------
    def _start_rendezvous(self) -> None:
        sock = self._rendezvous_socket
        self._sel.unregister(sock)
        slots = json.dumps(self.plan.horovod_slots(), separators=(",", ":"))
        allowed = json.dumps(sorted({h.address for h in self.plan.hosts}))
        debug("first rendezvous connection: starting Horovod's rendezvous server")
        self._rendezvous_proc = subprocess.Popen(
            [sys.executable, "-m", "popdist_launcher.rendezvous", str(sock.fileno()), slots,
             allowed],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(sock.fileno(),),
            process_group=0, close_fds=True)
        self._watchdog.watch(self._rendezvous_proc.pid)
        sock.close()  # the helper owns it now; if it dies, clients see a reset, not a hang
        self._rendezvous_socket = None

    # ---- ending -------------------------------------------------------------------------
    def _cleanup(self) -> None:
        for inst in self.instances:
            if inst.alive:
                procs.signal_group(inst.pid, signal.SIGKILL)
                inst.reap()
        for key in list(self._sel.get_map().values()):
            if key.data[0] == "out":
                self.router.close(key.data[1], key.data[2])
                key.fileobj.close()
        self._sel.close()
        self.router.close_files()
        if self._rendezvous_socket is not None:
            self._rendezvous_socket.close()
        if self._rendezvous_proc is not None:
            self._rendezvous_proc.stdin.close()
            try:
                self._rendezvous_proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                procs.signal_group(self._rendezvous_proc.pid, signal.SIGKILL)
                self._rendezvous_proc.wait()
        if self._watchdog is not None:
            self._watchdog.close()

    def _result(self) -> JobResult:
        codes = {i.index: i.returncode for i in self.instances}
        if self._signal is not None and self._failed is None:
            self.state = JobState.INTERRUPTED
            return JobResult(self.state, 128 + self._signal, None, self._signal, codes)
        if self._engine and self._engine_failure is not None and self._signal is None:
            self._attribute_engine_failure()
            self.state = JobState.FAILED
            self._summarize(self._failed)
            code = procs.exit_code_of(self._engine_failure)
            return JobResult(self.state, code, self._failed, self._signal, codes)
        if self._failed is not None:
            self.state = JobState.FAILED
            inst = next((i for i in self.instances if i.index == self._failed), None)
            if inst is None or inst.returncode in (None, 0):
                code = self._start_exit_code
            else:
                code = procs.exit_code_of(inst.returncode)
            self._summarize(self._failed)
            return JobResult(self.state, code, self._failed, self._signal, codes)
        self.state = JobState.SUCCEEDED
        return JobResult(self.state, 0, None, None, codes)

    def _summarize(self, index: int) -> None:
        inst = next((i for i in self.instances if i.index == index), None)
        host = self.plan.instances[index].host.name
        lines = ["", "poprun-lite: ===== job failed: root cause ====="]
        if self._engine and self._engine_failure is not None:
            lines.append(f"poprun-lite: instance {index} (host {host}, started by "
                         f"{self.backend.name}) {procs.describe_exit(self._engine_failure)}.")
        elif inst is not None and inst.returncode is not None:
            via = "ssh session pid" if inst.control else "pid"
            lines.append(f"poprun-lite: instance {index} (host {host}, {via} {inst.pid}) "
                         f"{self._describe(inst, inst.returncode)}.")
        else:
            lines.append(f"poprun-lite: instance {index} (host {host}) did not start.")
        tail = self.router.tail(index)
        if tail:
            lines.append(f"poprun-lite: last {len(tail)} line(s) of instance {index}'s stderr:")
            lines.extend(f"    {line}" for line in tail)
        else:
            lines.append(f"poprun-lite: instance {index} wrote nothing to stderr.")
        others = [] if self._engine else [
            f"{i.index}: {self._describe(i, i.returncode)}"
            for i in self.instances if i.index != index and i.returncode is not None]
        if others:
            lines.append("poprun-lite: other instances: " + "; ".join(others) + ".")
        self.say("\n".join(lines))


def _ignore(signum, frame) -> None:  # the wakeup fd carries the signal to the loop
    pass
