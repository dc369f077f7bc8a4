"""One attempt of a job: get every instance's wrapper started through the backend, supervise the
instances over the wrappers' connections, and end the job.

The job moves STARTING -> RUNNING -> STOPPING -> DRAINING -> SUCCEEDED | FAILED | INTERRUPTED
| STOPPED (``attempt.py``'s TRANSITIONS); each instance PENDING -> CONNECTED -> RUNNING -> EXITED
(or LOST when its wrapper's connection closes without an exit status). Everything is decided here,
from the wrappers' reports, the same way on every backend: in the plan's fixed world the first
instance to exit non-zero ends the job (the others get SIGTERM, then SIGKILL after the grace
period), as does an engine (mpirun, srun, ssh) that ends before its instances started; SIGINT,
SIGTERM and SIGHUP are forwarded as they are and stop the job; a console whose reader has gone
(``| head``) stops it as SIGTERM does; SIGUSR1 and SIGUSR2 are forwarded;
SIGQUIT prints every instance's Python stacks; ``--timeout`` collects the stacks, then stops the
job; the hang check (``hang/``), fed every frame that tells where an instance is, finds a hung one
and hands it to its world, which treats it as a dead one. What an instance's end means is its
world's (``world.py``): in an elastic job's open world instances are added while the job runs
and their ends are reported instead. The wrappers' connections are ``hub.py``'s, what their
frames mean ``frames.py``'s, the processes it starts ``spawner.py``'s, stdin forwarding
``stdin_forward.py``'s and stack collection ``stacks.py``'s; the attempts of a job are
``agents/fixed_world.py``'s.
"""
from __future__ import annotations

import os
import signal
import socket
import time
from typing import Callable, Dict, List, Optional, Tuple

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.layout.backends.base import Backend, Launch, Wiring
from popdist_launcher.launcher.supervision.attempt_end import write_attempt_end
from popdist_launcher.launcher.supervision.frames import WrapperFrames
from popdist_launcher.launcher.supervision.hang.check import HangCheck, SupervisorPort
from popdist_launcher.launcher.supervision.hub import Hub
from popdist_launcher.launcher.supervision.loop import EventLoop
from popdist_launcher.launcher.output.routing import Router
from popdist_launcher.launcher.supervision.spawner import Spawner
from popdist_launcher.launcher.supervision.stacks import StackCollector
from popdist_launcher.launcher.supervision.stdin_forward import StdinForwarder
from popdist_launcher.wire import protocol as p
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.launcher.supervision.attempt import (FINAL, TIMEOUT_EXIT_CODE, TRANSITIONS,
                                                           UNRESPONSIVE_SECONDS, Failure, Instance,
                                                           InstanceState, JobResult, JobState,
                                                           Outcome, Started)
from popdist_launcher.launcher.supervision.world import FixedWorld, World

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DUMP_SIGNAL = signal.SIGQUIT  # to the launcher: print every instance's Python stacks, go on
READER_GONE = signal.SIGPIPE  # what a console pipe nobody reads would send: the job's exit code
DRAIN_SECONDS = 5.0           # after RELEASE, for wrappers to flush and engines to exit


class Supervisor:
    """Runs one attempt (``run``) in one selector loop, over its world (``world.py``): the plan's
    fixed one unless an elastic job gives an ``OpenWorld``."""

    def __init__(self, plan: LaunchPlan, backend: Backend, router: Router,
                 rendezvous_socket: Optional[socket.socket] = None,
                 timeout: Optional[float] = None, world: Optional[World] = None,
                 hang_timeout: Optional[float] = None,
                 hang_busy_timeout: Optional[float] = None) -> None:
        self.plan = plan
        self.backend = backend
        self.router = router
        self.state = JobState.STARTING
        self.instances = [Instance(i.index, i.host.name) for i in plan.instances]
        if plan.evaluator:  # supervised as an instance, started as a local wrapper
            self.instances.append(Instance(plan.num_instances, socket.gethostname(), "evaluator"))
        self._timeout = timeout
        self._events = EventLoop()
        self._secret = os.urandom(16).hex()
        self._spawner = Spawner(self._events.sel, rendezvous_socket,
                                lambda label, text: router.engine_line(
                                    label, text, shown=not self._outcome.decided,
                                    noise=any(n in text for n in backend.engine_noise)))
        self._hub = Hub(self._events.sel, plan.num_instances)
        self._stacks = StackCollector(router, self._hub, self._ends, self._timed_out)
        self.hang = HangCheck(SupervisorPort(self), hang_timeout, hang_busy_timeout)
        self.world = world if world is not None else FixedWorld()
        self.world.bind(self)
        self._wiring: Optional[Wiring] = None
        self._stdin = StdinForwarder(self._events.sel, self._hub, self.world.stdin_target)
        self._frames = WrapperFrames(self, self._hub, self._stacks, self._stdin, self._secret)
        self._events.handle("conn", self._frames.on_conn)
        self._events.handle("engine-out", lambda key, _: self._spawner.output(key.fd, key.data[1]))
        self._events.handle("exit", lambda key, _: self._on_process_exit(key.data[1]))
        self._events.handle("listen", lambda key, _: self._hub.accept(key.fileobj))
        self._events.handle("stdin", lambda *_: self._stdin.on_readable())
        self._events.handle("rendezvous", lambda *_: self._spawner.start_rendezvous(self.plan))
        self._outcome = Outcome()
        self.failure_title = "job"  # what the failure report says failed ("attempt 2")
        self._job_deadline = time.monotonic() + timeout if timeout else None
        self._kill_deadline: Optional[float] = None
        self._unresponsive_deadline: Optional[float] = None
        self._drain_deadline: Optional[float] = None
        self._running_at_signal: List[int] = []  # for the summary after a stopping signal

    # ---- public -------------------------------------------------------------------------------
    def run(self) -> JobResult:
        with self._events.signals(FORWARDED_SIGNALS + (DUMP_SIGNAL, signal.SIGTTIN),
                                self._on_signal):
            try:
                self._start_all()
                self._loop()
            finally:
                self._cleanup()
        return self._result()

    @property
    def failure(self) -> Optional[Failure]:
        """What ended the attempt, when it failed (its root cause, kind and exit code)."""
        return self._outcome.failure

    def watch(self, fileobj, callback: Callable[[], None]) -> None:
        """Call ``callback`` from the loop whenever ``fileobj`` is readable (before or while
        it runs)."""
        self._events.watch(fileobj, callback)

    def unwatch(self, fileobj) -> None:
        """Stop watching ``fileobj`` (before closing it)."""
        self._events.unwatch(fileobj)

    def request_stop(self, reason: str) -> None:
        """End the attempt on the launcher's own request (a membership change): every instance
        gets SIGTERM, then SIGKILL after the grace period; the attempt ends STOPPED, and the
        instances' exits on the way are not failures."""
        if self._outcome.decided or self.state not in (JobState.STARTING, JobState.RUNNING):
            return
        self._outcome.stop_reason = reason
        running = sum(1 for i in self.instances if not i.settled)
        console.say(f"{reason}; stopping {running} instance(s) (SIGKILL after "
                    f"{self.plan.grace_period:g} s).")
        self._begin_stop(signal.SIGTERM)

    def new_round(self) -> None:
        """An open world's instances re-form (a Horovod round): the hang clock starts again."""
        self.hang.restart(time.monotonic())

    @property
    def rendezvous(self) -> Tuple[str, int]:
        """The plan's rendezvous address and port."""
        return self.plan.rendezvous_address, self.plan.rendezvous_port

    def engine_failed_to_start(self) -> bool:
        """Whether an engine failed by a known start-up transient before any instance started
        (nothing of the user's program ran): worth starting once more."""
        return self._outcome.engine_failed_to_start(self.instances, self.backend.start_transients)

    # ---- state -----------------------------------------------------------------------------
    def _to(self, state: JobState) -> None:
        if state is self.state:
            return
        if state not in TRANSITIONS.get(self.state, ()):
            raise AssertionError(f"job state {self.state.value} -> {state.value}")
        console.debug("job %s -> %s", self.state.value, state.value)
        self.state = state

    def fail(self, failure: Failure) -> None:
        """The first failure is the job's (after an instance reported a stalled collective:
        the stall); it stops the job."""
        if self._outcome.decided or self.state in (JobState.DRAINING,) + FINAL:
            return
        failure = self.hang.stall or failure
        self._outcome.failure = failure
        running = sum(1 for i in self.instances
                      if not i.settled and i.index != failure.cause.instance)
        other = "the other " if failure.cause.instance is not None else ""
        console.say(failure.cause.headline + (
            f" Stopping {other}{running} instance(s)." if running else ""))
        self._stacks.after_report(lambda: self.state in (JobState.STARTING, JobState.RUNNING)
                                  and self._begin_stop(signal.SIGTERM))

    # ---- starting ----------------------------------------------------------------------------
    def _start_all(self) -> None:
        launches_remote = any(not i.host.local for i in self.plan.instances) or \
            self.world.remote
        wiring = self._wiring = Wiring(self._hub.listen_unix(self._secret[:8]),
                                       self._hub.listen_tcp(self.plan.rendezvous_address)
                                       if launches_remote else None, self.plan.start_timeout)
        launches = self.world.launches(wiring, self._secret)
        if self.plan.evaluator:
            launches.append(Launch("evaluator", (self.plan.num_instances,)))
        if any(launch.argv for launch in launches) or self.world.accepting:
            self._spawner.remove_if_killed(self._hub.unix_dir)  # the socket's folder
        else:
            self._hub.close_listeners(unix_only=True)
        self._stdin.setup()
        for launch in launches:
            self._start(launch)
            if self._outcome.failure is not None:
                break
        self._spawner.await_rendezvous()

    def start_one(self, index: int, host: Host) -> None:
        """Start instance ``index`` alone on ``host`` (an open world's)."""
        self._start(self.backend.launch_one(index, host, self._wiring, self._secret))

    def _start(self, launch: Launch) -> None:
        """A wrapper forked on this host (``launch.argv`` None), else an engine."""
        if launch.argv is None:
            index = launch.instances[0]
            started, sock = self._spawner.fork(launch, self.world.spec(index))
            inst = self.instances[index]
            inst.conn, inst.launch = self._hub.add(sock, index), started
            inst.to(InstanceState.CONNECTED)
            if index == 0:
                self._stdin.flush()
            return
        try:
            started = self._spawner.spawn(launch)
        except OSError as exc:
            cause = report.Cause(f"{launch.label} could not be started: {exc.strerror or exc}.")
            self.world.spawn_failed(launch, cause,
                                    126 if isinstance(exc, PermissionError) else 127)
            return
        for index in launch.instances:
            self.instances[index].launch = started

    # ---- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while self.state not in FINAL:
            now = time.monotonic()
            self._on_deadlines(now)
            self._advance()
            if self.state in FINAL:
                break
            deadlines = [d for d in (self._job_deadline,
                                     self._kill_deadline, self._unresponsive_deadline,
                                     self._drain_deadline, self.router.held_deadline,
                                     self._stacks.deadline, self.world.deadline(),
                                     self.hang.deadline())
                         if d is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            self._events.wait(timeout)

    def _on_deadlines(self, now: float) -> None:
        self.router.show_held(now)
        if self.router.reader_gone and not self._outcome.decided and \
                self.state in (JobState.STARTING, JobState.RUNNING):
            # Python ignores SIGPIPE: the Router saw its console pipe refuse a write (as mpirun
            # stops on SIGPIPE). Only the console's pipes count, never a socket or an engine's
            # stdin whose reader has gone.
            self._stop_for(READER_GONE, signal.SIGTERM, "the reader of its output has gone "
                           "(SIGPIPE); sending SIGTERM")
        self.world.on_deadlines(now)
        if self._job_deadline is not None and now >= self._job_deadline:
            self._job_deadline = None
            if self.state in (JobState.STARTING, JobState.RUNNING):
                console.say(f"--timeout {self._timeout:g} s expired; collecting every "
                            f"instance's Python stacks, then stopping the job.")
                self._stacks.request(self.instances, f"--timeout {self._timeout:g} s expired",
                                     "timeout")
        if self.state in (JobState.STARTING, JobState.RUNNING):
            self.hang.tick(now)
        if self._stacks.dump is not None and now >= self._stacks.dump.deadline:
            self._stacks.done()
        if self._kill_deadline is not None and now >= self._kill_deadline:
            self._kill_deadline = None
            self._kill_everything()
        if self._unresponsive_deadline is not None and now >= self._unresponsive_deadline:
            self._unresponsive_deadline = None
            for inst in self.instances:
                if not inst.settled:
                    self.lose(inst, "did not answer SIGKILL")
            self._spawner.kill_engines()
        if self._drain_deadline is not None and now >= self._drain_deadline:
            self._drain_deadline = None
            for conn in self._hub.conns:
                self._hub.close(conn)
            self._spawner.kill_all()

    def _timed_out(self) -> None:
        """--timeout's stacks are in: the job fails."""
        cause = report.Cause(f"the job timeout (--timeout {self._timeout:g} s) expired.")
        self.fail(Failure(cause, TIMEOUT_EXIT_CODE, "timeout"))

    def _advance(self) -> None:
        """Move the job on once what it waits for has happened."""
        if self.state is JobState.STARTING and all(
                i.state in (InstanceState.RUNNING, InstanceState.EXITED) for i in self.instances):
            self._to(JobState.RUNNING)
        if self.state in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING):
            for inst in self.instances:  # never connected, and nothing left that could start it
                if inst.state is InstanceState.PENDING and inst.launch is not None \
                        and inst.launch.returncode is not None:
                    inst.to(InstanceState.LOST)
                    self.world.ended(inst, "start-failed", f"{inst.launch.launch.label} ended")
            if all(i.settled for i in self.instances) and not self.world.accepting:
                self._begin_drain()
        if self.state is JobState.DRAINING:
            if all(c.closed for c in self._hub.conns) and \
                    all(s.returncode is not None for s in self._spawner.started):
                self._to(self._outcome.state)

    @property
    def stacks(self) -> StackCollector:
        return self._stacks

    @property
    def stopping_signal(self) -> Optional[int]:
        """The signal that stops the job, while it stops (an instance that starts meanwhile
        gets it too)."""
        return self._outcome.signal if self.state is JobState.STOPPING else None

    def send(self, inst: Instance, kind: int, payload: bytes = b"") -> None:
        """One frame to ``inst``'s wrapper (it has a connection)."""
        self._hub.send(inst.conn, kind, payload)

    def lose(self, inst: Instance, what: str, how: str = "lost",
             host_gone: bool = False) -> None:
        """``inst`` ended without an exit status (``what`` happened; ``how`` as an open world
        reports it); ``host_gone``: its host stopped answering. Its world says what follows."""
        inst.to(InstanceState.LOST)
        self.hang.ended(inst, time.monotonic(), False)
        if inst.conn is not None:
            self._hub.close(inst.conn)
        inst.kill_forked_program()
        self.world.lost(inst, what, how, host_gone)

    # ---- engines and forked wrappers --------------------------------------------------------
    def _on_process_exit(self, started: Started) -> None:
        # Its pidfd is readable: it has ended. Waiting is at once, except under a tracer
        # (strace -f), which may hold the exit status a moment after the pidfd tells.
        self._spawner.reap(started, block=True)
        code = started.returncode
        console.debug("%s %s", started.launch.label, report.describe_exit(code))
        never = [self.instances[i] for i in started.launch.instances
                 if self.instances[i].state in (InstanceState.PENDING, InstanceState.CONNECTED)]
        if never and self.state in (JobState.STARTING, JobState.RUNNING):
            if started.engine:  # the engine's last words, for the report
                self._spawner.last_words(started)
            how = self.backend.explain_engine_exit(started.launch, code) or \
                report.describe_exit(code)
            self.world.engine_ended(started, never, how)

    # ---- signals -----------------------------------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        if signum == DUMP_SIGNAL:
            if self._stacks.dump is None:
                console.say("SIGQUIT: collecting every instance's Python stacks (the job goes "
                            "on).")
                self._stacks.request(self.instances, "on request (SIGQUIT to poprun-lite)",
                                     "print")
        elif signum in FORWARDED_SIGNALS:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum not in STOPPING_SIGNALS:
            console.debug("forwarding %s", name)
            for inst in self.instances:
                self.signal_instance(inst, signum)
            return
        if self._outcome.signal is not None or self.state is JobState.DRAINING:
            console.say(f"{name} again; killing all instances now.")
            self._kill_everything()
            return
        self._stop_for(signum, signum, f"received {name}; forwarding it")

    def _stop_for(self, signum: int, sent: int, what: str) -> None:
        """Stop the job for the stopping signal ``signum`` (its exit code 128+signum): ``sent``
        to every running instance, SIGKILL after the grace period."""
        self._outcome.signal = signum
        self._running_at_signal = [i.index for i in self.instances if not i.settled]
        running = len(self._running_at_signal)
        console.say(f"{what} to {running} instance(s) (SIGKILL after "
                    f"{self.plan.grace_period:g} s).")
        self._begin_stop(sent)

    def signal_instance(self, inst: Instance, signum: int) -> None:
        """``signum`` to ``inst``'s program, through its wrapper, unless it has ended."""
        if inst.conn is not None and not inst.settled:
            self._hub.send(inst.conn, p.SIGNAL, bytes([signum]))

    def _begin_stop(self, signum: int) -> None:
        self.world.stopping()
        self._to(JobState.STOPPING)
        for inst in self.instances:
            if not inst.settled:
                inst.stopped = True
                self.signal_instance(inst, signum)
        self._kill_deadline = time.monotonic() + self.plan.grace_period

    def _kill_everything(self) -> None:
        for inst in self.instances:
            self.signal_instance(inst, signal.SIGKILL)
        self._spawner.kill_engines(lambda launch: any(  # engines still starting instances
            self.instances[i].state is InstanceState.PENDING for i in launch.instances))
        self._unresponsive_deadline = time.monotonic() + UNRESPONSIVE_SECONDS

    # ---- ending ------------------------------------------------------------------------------
    def _begin_drain(self) -> None:
        self._to(JobState.DRAINING)
        self._kill_deadline = self._unresponsive_deadline = self._job_deadline = None
        self._stacks.done()
        for conn in self._hub.conns:
            if conn.index is None:
                self._hub.close(conn)
            else:
                self._hub.send(conn, p.RELEASE)
        self._hub.close_listeners()
        self._drain_deadline = time.monotonic() + DRAIN_SECONDS

    def _ends(self) -> Dict[int, report.InstanceEnd]:
        return {inst.index: inst.end() for inst in self.instances}

    def _cleanup(self) -> None:
        for conn in self._hub.conns:
            self._hub.close(conn)
        self._spawner.end()
        self._hub.close_all()
        self._spawner.close()
        self._events.close()

    def _result(self) -> JobResult:
        write_attempt_end(self._outcome, self.instances, self.router, self._ends(),
                          self._stacks, self.failure_title, self._running_at_signal)
        return self._outcome.result()
