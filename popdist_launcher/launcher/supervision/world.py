"""Who an attempt's instances are, and what their ends mean: the plan's fixed world, where any
failure ends the job, or an elastic job's open world, where instances come and go."""
from __future__ import annotations

import abc
import os
import signal
import time
from typing import Callable, Dict, List, Optional, Protocol, Set, Tuple

from popdist_launcher.wire import contract as c
from popdist_launcher.compat import keras2
from popdist_launcher.launcher.supervision import processes
from popdist_launcher.launcher.output import report
from popdist_launcher.launcher.supervision.attempt import (TIMEOUT_EXIT_CODE, UNRESPONSIVE_SECONDS,
                                                           Failure, Instance, InstanceState,
                                                           JobState, Started)
from popdist_launcher.launcher.layout.backends.base import Backend, Launch, Wiring
from popdist_launcher.launcher.supervision.hub import Conn
from popdist_launcher.launcher.output.routing import LogFiles, Router
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.wire import protocol as p


class Supervision(Protocol):
    """What a world uses of the supervisor it belongs to (``supervisor.Supervisor``)."""

    plan: LaunchPlan
    backend: Backend
    router: Router
    instances: List[Instance]
    state: JobState

    def fail(self, failure: Failure) -> None: ...

    def lose(self, inst: Instance, what: str, how: str = "lost",
             host_gone: bool = False) -> None: ...

    def start_one(self, index: int, host: Host) -> None: ...

    def signal_instance(self, inst: Instance, signum: int) -> None: ...

    def send(self, inst: Instance, kind: int, payload: bytes = b"") -> None: ...


class World(abc.ABC):
    """What the supervisor asks of its world; the base answers as both worlds agree."""

    remote = False  # instances may be started on other hosts than the plan's
    accepting = False  # instances may still be added
    stdin_to: Optional[int] = 0  # the instance the launcher's stdin goes to
    sup: Supervision

    def bind(self, sup: Supervision) -> None:
        self.sup = sup

    def launches(self, wiring: Wiring, secret: str) -> List[Launch]:
        """The launches that start the attempt."""
        return []

    def stdin_target(self) -> Tuple[Optional[Conn], bool]:
        """The connection of the instance stdin goes to (None until it has one), and whether
        that instance has ended (stdin goes nowhere: None, True)."""
        if self.stdin_to is None:
            return None, True
        inst = self.sup.instances[self.stdin_to]
        return inst.conn, inst.settled

    def spec(self, index: int) -> dict:
        """What instance ``index`` runs: the program, the variables it gets on top of what it
        inherits, its folder, and whether the launcher's stdin goes to it."""
        env = {"PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
        if keras2.instance_value() is not None:  # Keras 2 on TensorFlow 2.16+
            env[c.LEGACY_KERAS] = keras2.instance_value()
        env.update(self._env(index))
        return {"argv": list(self.sup.plan.program), "env": env, "cwd": os.getcwd(),
                "stdin": index == self.stdin_to}

    def _env(self, index: int) -> Dict[str, str]:
        plan = self.sup.plan
        return plan.instance_env(index) if index < plan.num_instances else plan.evaluator_env()

    def deadline(self) -> Optional[float]:
        """The nearest deadline of the world's own (instances' start and kill deadlines)."""
        return None

    def on_deadlines(self, now: float) -> None:
        """Act on the world's deadlines that have passed."""

    def started(self, inst: Instance) -> None:
        """``inst``'s program runs."""

    def progressed(self, inst: Instance, step: int) -> None:
        """``inst``'s program reported progress (``step``)."""

    def hung(self, inst: Instance) -> None:
        """``inst`` made no progress while its peers waited (``inst.hung`` says how): it is
        killed, and its end is a failure like a death."""
        self.sup.signal_instance(inst, signal.SIGKILL)

    def ended(self, inst: Instance, how: str, detail: str = "") -> None:
        """``inst`` ended (once): ``how`` as ``OpenWorld`` reports it."""

    @abc.abstractmethod
    def exited(self, inst: Instance) -> None:
        """``inst`` exited with ``inst.returncode``."""

    @abc.abstractmethod
    def lost(self, inst: Instance, what: str, how: str, host_gone: bool) -> None:
        """``inst`` ended without an exit status (``what`` happened); when ``host_gone``, its
        host stopped answering."""

    @abc.abstractmethod
    def engine_ended(self, started: Started, never: List[Instance], how: str) -> None:
        """An engine ended (``how``) before the instances ``never`` started."""

    @abc.abstractmethod
    def spawn_failed(self, launch: Launch, cause: report.Cause, code: int) -> None:
        """The engine of ``launch`` could not be started."""

    def stopping(self) -> None:
        """The whole job begins to stop, before any instance is signalled."""

    def _lose_host(self, inst: Instance) -> None:
        """The other instances on ``inst``'s host are as unreachable: lost with it, now."""
        for other in self.sup.instances:
            if other.host == inst.host and not other.settled:
                self.sup.lose(other, f"was lost with its host {inst.host}")


class FixedWorld(World):
    """The plan's instances, started at once; the first to fail ends the job, as does one that
    has not started when the start timeout expires; stdin goes to instance 0."""

    _start_by: Optional[float] = None

    def bind(self, sup: Supervision) -> None:
        super().bind(sup)
        self._start_by = time.monotonic() + sup.plan.start_timeout

    def launches(self, wiring: Wiring, secret: str) -> List[Launch]:
        return self.sup.backend.launches(self.sup.plan, wiring, secret)

    def deadline(self) -> Optional[float]:
        return self._start_by if self.sup.state is JobState.STARTING else None

    def on_deadlines(self, now: float) -> None:
        if self._start_by is not None and now >= self._start_by:
            self._start_by = None
            self._on_start_timeout()

    def _on_start_timeout(self) -> None:
        sup = self.sup
        late = [i for i in sup.instances
                if i.state in (InstanceState.PENDING, InstanceState.CONNECTED)]
        if not late or sup.state is not JobState.STARTING:
            return
        hosts = list(dict.fromkeys(i.host for i in late))
        which = ", ".join(str(i.index) for i in late)
        hint = f"check that 'ssh {hosts[0]} true' answers, or raise --start-timeout" \
            if any(not sup.plan.instances[i.index].host.local for i in late
                   if i.index < sup.plan.num_instances) \
            else "raise --start-timeout"
        cause = report.Cause(f"start timeout ({sup.plan.start_timeout:g} s) expired: instances "
                             f"{which} on host(s) {', '.join(hosts)} did not start; {hint}.",
                             late[0].index)
        for inst in late:
            if inst.state is InstanceState.PENDING:
                inst.to(InstanceState.LOST)
        sup.fail(Failure(cause, TIMEOUT_EXIT_CODE, "start-timeout"))

    def exited(self, inst: Instance) -> None:
        if inst.returncode != 0:
            cause = report.Cause(f"{inst.who} {report.describe_exit(inst.returncode)} "
                                 f"(host {inst.host}), pid {inst.pid}.", inst.index)
            self.sup.fail(Failure(cause, processes.exit_code_of(inst.returncode), "instance"))

    def hung(self, inst: Instance) -> None:
        cause = report.Cause(f"{inst.who} (host {inst.host}) {inst.hung}; killed it with "
                             f"SIGKILL.", inst.index)
        super().hung(inst)
        self.sup.fail(Failure(cause, 1, "hung"))

    def lost(self, inst: Instance, what: str, how: str, host_gone: bool) -> None:
        cause = report.Cause(f"{inst.who} (host {inst.host}) {what}.", inst.index)
        self.sup.fail(Failure(cause, 1, "host-lost" if host_gone else "lost"))
        if host_gone:
            self._lose_host(inst)
            instances = self.sup.instances
            for started in {id(i.launch): i.launch for i in instances
                            if i.host == inst.host and i.launch is not None}.values():
                if started.engine and started.returncode is None and all(
                        instances[i].settled for i in started.launch.instances):
                    processes.signal_group(started.pid, signal.SIGKILL)  # its ssh client

    def engine_ended(self, started: Started, never: List[Instance], how: str) -> None:
        which = ", ".join(str(i.index) for i in never)
        hosts = ", ".join(dict.fromkeys(i.host for i in never))
        cause = report.Cause(f"{started.launch.label} {how} before instance(s) {which} "
                             f"started (host(s) {hosts}).", None, tuple(started.lines))
        code = processes.exit_code_of(started.returncode) or 1
        for inst in never:
            inst.to(InstanceState.LOST)
        self.sup.fail(Failure(cause, code, "engine"))

    def spawn_failed(self, launch: Launch, cause: report.Cause, code: int) -> None:
        self.sup.fail(Failure(cause, code, "engine"))


class Timer(Protocol):
    """A deadline of the agent's own, kept by an open world (the driver helper's heartbeat)."""

    def deadline(self) -> Optional[float]: ...

    def expired(self, now: float) -> None: ...


class OpenWorld(World):
    """An elastic job's world (Horovod mode): it starts empty, instances are added while the job
    runs (``add_instance``) and their ends are reported instead of ending the job; stdin goes
    nowhere.

    ``on_end(inst, how, detail)``: ``how`` is "exited" (``inst.returncode`` says how), "lost"
    (its wrapper's connection ended without an exit status, or its host stopped answering),
    "start-failed" (its engine or the start timeout ended it before it ran) or "not-started";
    exactly one call per instance. ``on_stopping()``: the whole job begins to stop (a signal,
    ``--timeout``, ``request_stop``), before any instance is signalled. ``remote``: instances may
    be started on other hosts (the launcher listens on TCP too)."""

    stdin_to = None

    def __init__(self, on_end: Callable[[Instance, str, str], None],
                 on_stopping: Callable[[], None], remote: bool = False,
                 on_progress: Callable[[Instance, int], None] = lambda inst, step: None,
                 timer: Optional["Timer"] = None) -> None:
        self.on_end = on_end
        self.on_stopping = on_stopping
        self.on_progress = on_progress
        self.timer = timer
        self.remote = remote
        self.accepting = True
        self._envs: Dict[int, Dict[str, str]] = {}
        self._start_by: Dict[int, float] = {}  # each instance's own start and kill deadlines
        self._kill_at: Dict[int, float] = {}
        self._killed: Set[int] = set()  # SIGKILL sent by its own kill deadline

    def add_instance(self, host: Host, env: Dict[str, str], tag: str,
                     logs: Optional[LogFiles] = None) -> Instance:
        """Start one more instance of the program on ``host`` with ``env`` on top of what it
        inherits (from a ``Supervisor.watch`` callback, while the job runs), named "instance
        <tag>", its output tagged ``[tag]`` and logged in ``logs``: ``register`` then
        ``start``."""
        inst = self.register(host, env, tag, logs)
        self.start(inst, host)
        return inst

    def register(self, host: Host, env: Dict[str, str], tag: str,
                 logs: Optional[LogFiles] = None) -> Instance:
        """One more instance, its index given, not started yet (``start``)."""
        sup = self.sup
        inst = Instance(len(sup.instances), host.name, f"instance {tag}")
        self._envs[inst.index] = env
        sup.instances.append(inst)
        sup.router.add(inst.index, tag, logs, host.name)
        return inst

    def start(self, inst: Instance, host: Host) -> None:
        """Start a registered instance on ``host``. Its end is reported to ``on_end``, at once
        ("not-started") once the job is stopping."""
        if not self.accepting:
            inst.to(InstanceState.EXITED)
            self.on_end(inst, "not-started", "the job is ending")
            return
        self._start_by[inst.index] = time.monotonic() + self.sup.plan.start_timeout
        self.sup.start_one(inst.index, host)

    def stop_instance(self, inst: Instance) -> None:
        """SIGTERM to one instance, SIGKILL after the grace period."""
        if inst.settled or inst.stopped:
            return
        inst.stopped = True
        self._start_by.pop(inst.index, None)
        self._kill_at[inst.index] = time.monotonic() + self.sup.plan.grace_period
        self.sup.signal_instance(inst, signal.SIGTERM)

    def send_to(self, inst: Instance, kind: int, payload: bytes = b"") -> None:
        """One frame to a running instance's wrapper (none to one that is not connected yet,
        has ended or is being stopped)."""
        if inst.conn is not None and not inst.settled and not inst.stopped:
            self.sup.send(inst, kind, payload)

    def close(self) -> None:
        """No instance will be added any more; the live ones are stopped with the grace period,
        and the job ends (succeeded) once every instance has ended."""
        self.accepting = False
        for inst in self.sup.instances:
            self.stop_instance(inst)

    def _env(self, index: int) -> Dict[str, str]:
        own = self._envs.get(index)
        return own if own is not None else super()._env(index)

    def deadline(self) -> Optional[float]:
        found = [d for deadlines in (self._start_by, self._kill_at)
                 for i, d in deadlines.items() if not self.sup.instances[i].settled]
        if self.timer is not None and self.timer.deadline() is not None:
            found.append(self.timer.deadline())
        return min(found) if found else None

    def progressed(self, inst: Instance, step: int) -> None:
        self.on_progress(inst, step)

    def on_deadlines(self, now: float) -> None:
        sup = self.sup
        if self.timer is not None:
            timer_at = self.timer.deadline()
            if timer_at is not None and now >= timer_at:
                self.timer.expired(now)
        for inst in sup.instances:
            if inst.settled:
                continue
            start_by, kill_at = self._start_by.get(inst.index), self._kill_at.get(inst.index)
            if start_by is not None and now >= start_by:
                sup.lose(inst, f"did not start within --start-timeout "
                               f"{sup.plan.start_timeout:g} s", "start-failed")
            elif kill_at is not None and now >= kill_at:
                killed = inst.index in self._killed
                if killed or inst.conn is None:
                    sup.lose(inst, "did not answer SIGKILL" if killed else
                             "was stopped before its wrapper connected")
                    continue
                self._killed.add(inst.index)
                self._kill_at[inst.index] = now + UNRESPONSIVE_SECONDS
                sup.signal_instance(inst, signal.SIGKILL)

    def started(self, inst: Instance) -> None:
        self._start_by.pop(inst.index, None)

    def ended(self, inst: Instance, how: str, detail: str = "") -> None:
        self._start_by.pop(inst.index, None)
        self._kill_at.pop(inst.index, None)
        self.on_end(inst, how, detail)

    def exited(self, inst: Instance) -> None:
        if inst.conn is not None:  # its wrapper need not wait for the job's end
            self.sup.send(inst, p.RELEASE)
        self.ended(inst, "exited")

    def lost(self, inst: Instance, what: str, how: str, host_gone: bool) -> None:
        started = inst.launch
        if started is not None and started.engine and started.returncode is None:
            processes.signal_group(started.pid, signal.SIGKILL)  # its ssh client, now
        self.ended(inst, how, what)
        if host_gone:
            self._lose_host(inst)

    def engine_ended(self, started: Started, never: List[Instance], how: str) -> None:
        for inst in never:
            self.sup.lose(inst, f"{started.launch.label} {how} before it started",
                          "start-failed")

    def spawn_failed(self, launch: Launch, cause: report.Cause, code: int) -> None:
        for index in launch.instances:
            inst = self.sup.instances[index]
            inst.to(InstanceState.LOST)
            self.ended(inst, "start-failed", cause.headline)

    def stopping(self) -> None:
        if self.accepting:  # first, so that nothing starts replacements meanwhile
            self.accepting = False
            self.on_stopping()
