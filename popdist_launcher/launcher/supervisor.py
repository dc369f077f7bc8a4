"""One attempt of a job: get every instance's wrapper started through the backend, supervise the
instances over the wrappers' connections, and end the job.

The job moves STARTING -> RUNNING -> STOPPING -> DRAINING -> SUCCEEDED | FAILED | INTERRUPTED
| STOPPED (``attempt.py``'s TRANSITIONS); each instance PENDING -> CONNECTED -> RUNNING -> EXITED
(or LOST when its wrapper's connection closes without an exit status). Everything is decided here,
from the wrappers' reports, the same way on every backend: the first instance to exit non-zero ends the
job (the others get SIGTERM, then SIGKILL after the grace period); SIGINT, SIGTERM and SIGHUP
are forwarded as they are and stop the job; SIGUSR1 and SIGUSR2 are forwarded; SIGQUIT prints
every instance's Python stacks; ``--timeout`` collects the stacks, then stops the job. An engine
(mpirun, srun, ssh) that ends before its instances started is the job's failure. The wrappers'
connections are ``hub.py``'s, stdin forwarding ``stdin_forward.py``'s and stack collection
``stacks.py``'s; the attempts of a job are ``agent.py``'s. In an elastic job's open world
(``OpenWorld``) instances are added while the job runs and their ends are reported instead.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

from popdist_launcher.launcher.spawned import rendezvous
from popdist_launcher.launcher._say import debug
from popdist_launcher.launcher import fast_start, processes, report
from popdist_launcher.launcher.backends.base import Backend, Launch, Wiring
from popdist_launcher.launcher.hub import Conn, Hub
from popdist_launcher.launcher.output import STDERR, STDOUT, LogFiles, Router
from popdist_launcher.launcher.stacks import StackCollector
from popdist_launcher.launcher.stdin_forward import StdinForwarder
from popdist_launcher.launcher.spawned import protocol as p
from popdist_launcher.launcher.plan import Host, LaunchPlan
from popdist_launcher.launcher.attempt import (
    FINAL, TRANSITIONS, Failure, Instance, InstanceState, JobResult, JobState, OpenWorld,
    Started)

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DUMP_SIGNAL = signal.SIGQUIT  # to the launcher: print every instance's Python stacks, go on
UNRESPONSIVE_SECONDS = 5.0    # after SIGKILL was sent, a wrapper that still has not answered
DRAIN_SECONDS = 5.0           # after RELEASE, for wrappers to flush and engines to exit
TIMEOUT_EXIT_CODE = 124       # as timeout(1)
# The launcher's own variables a program on its host must not inherit (an engine sets its own).
ENGINE_PREFIXES = ("OMPI_", "PMIX_", "PRTE_", "SLURM_", "SRUN_")


class Supervisor:
    def __init__(self, plan: LaunchPlan, backend: Backend, router: Router,
                 rendezvous_socket: Optional[socket.socket] = None,
                 timeout: Optional[float] = None, world: Optional[OpenWorld] = None) -> None:
        self.plan = plan
        self.backend = backend
        self.router = router
        self.state = JobState.STARTING
        self.instances = [Instance(i.index, i.host.name) for i in plan.instances]
        if plan.evaluator:  # supervised as an instance, started as a local wrapper
            self.instances.append(Instance(plan.num_instances, socket.gethostname(), "evaluator"))
        self._rendezvous_socket = rendezvous_socket
        self._rendezvous_proc: Optional[subprocess.Popen] = None
        self._timeout = timeout
        self._sel = selectors.DefaultSelector()
        self._secret = os.urandom(16).hex()
        self._started: List[Started] = []
        self._hub = Hub(self._sel, plan.num_instances)
        self._stacks = StackCollector(router, self._hub)
        self._world = world
        self._world_open = world is not None  # instances may still be added
        self._wiring: Optional[Wiring] = None
        if world is None:
            first = self.instances[0]
            self._stdin = StdinForwarder(self._sel, self._hub,
                                         lambda: (first.conn, first.settled))
        else:  # no instance 0 for the whole job: stdin goes nowhere
            self._stdin = StdinForwarder(self._sel, self._hub, lambda: (None, True))
        self._failure: Optional[Failure] = None
        self._signal: Optional[int] = None
        self._stop_reason: Optional[str] = None
        self.failure_title = "job"  # what the failure report says failed ("attempt 2")
        self._watchdog: Optional[processes.Watchdog] = None
        now = time.monotonic()
        self._start_deadline: Optional[float] = None if world else now + plan.start_timeout
        self._job_deadline = now + timeout if timeout else None
        self._kill_deadline: Optional[float] = None
        self._unresponsive_deadline: Optional[float] = None
        self._drain_deadline: Optional[float] = None

    # ---- public -------------------------------------------------------------------------------
    def run(self) -> JobResult:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        handled = FORWARDED_SIGNALS + (DUMP_SIGNAL, signal.SIGTTIN)
        previous = {s: signal.signal(s, _ignore) for s in handled}
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self._sel.register(wake_r, selectors.EVENT_READ, ("signal",))
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

    @property
    def failure(self) -> Optional[Failure]:
        """What ended the attempt, when it failed (its root cause, kind and exit code)."""
        return self._failure

    def watch(self, fileobj, callback: Callable[[], None]) -> None:
        """Call ``callback`` from the loop whenever ``fileobj`` is readable (before or while
        it runs)."""
        self._sel.register(fileobj, selectors.EVENT_READ, ("watch", callback))

    def unwatch(self, fileobj) -> None:
        """Stop watching ``fileobj`` (before closing it)."""
        watched = self._sel.get_map()  # None once the job has ended
        if watched is not None and fileobj in watched:
            self._sel.unregister(fileobj)

    def request_stop(self, reason: str) -> None:
        """End the attempt on the launcher's own request (a membership change): every instance
        gets SIGTERM, then SIGKILL after the grace period; the attempt ends STOPPED, and the
        instances' exits on the way are not failures."""
        if self._failure is not None or self._signal is not None or \
                self._stop_reason is not None or self.state not in (JobState.STARTING,
                                                                   JobState.RUNNING):
            return
        self._stop_reason = reason
        running = sum(1 for i in self.instances if not i.settled)
        self.router.say(f"poprun-lite: {reason}; stopping {running} instance(s) (SIGKILL after "
                        f"{self.plan.grace_period:g} s).")
        self._begin_stop(signal.SIGTERM)

    def add_instance(self, host: Host, env: Dict[str, str], tag: str,
                     logs: Optional[LogFiles] = None) -> Instance:
        """Open world: start one more instance of the program on ``host`` with ``env`` on top
        of what it inherits (from a ``watch`` callback, while the job runs), named "instance
        <tag>", its output tagged ``[tag]`` and logged in ``logs``. Its end is reported to
        ``OpenWorld.on_end``, at once ("not-started") once the job is stopping."""
        inst = Instance(len(self.instances), host.name, f"instance {tag}")
        inst.env = env
        self.instances.append(inst)
        self.router.add(inst.index, tag, logs, host.name)
        if not self._world_open:
            inst.state = InstanceState.EXITED
            self._world.on_end(inst, "not-started", "the job is ending")
            return inst
        inst.start_by = time.monotonic() + self.plan.start_timeout
        launch = self.backend.launch_one(inst.index, host, self._wiring, self._secret)
        if launch.argv is None:
            self._fork(launch)
        else:
            self._spawn(launch)
        return inst

    def stop_instance(self, inst: Instance) -> None:
        """Open world: SIGTERM to one instance, SIGKILL after the grace period."""
        if inst.settled or inst.stopped:
            return
        inst.stopped = True
        inst.start_by = None
        inst.kill_at = time.monotonic() + self.plan.grace_period
        self._signal_instance(inst, signal.SIGTERM)

    def send_to(self, inst: Instance, kind: int, payload: bytes = b"") -> None:
        """Open world: one frame to a running instance's wrapper (none to one that is not
        connected yet, has ended or is being stopped)."""
        if inst.conn is not None and not inst.settled and not inst.stopped:
            self._hub.send(inst.conn, kind, payload)

    def close_world(self) -> None:
        """Open world: no instance will be added any more; the live ones are stopped with the
        grace period, and the job ends (succeeded) once every instance has ended."""
        self._world_open = False
        for inst in self.instances:
            self.stop_instance(inst)

    def engine_failed_to_start(self) -> bool:
        """Whether an engine failed by a known start-up transient before any instance started
        (nothing of the user's program ran): worth starting once more."""
        failure = self._failure
        if failure is None or failure.kind != "engine" or self._signal is not None:
            return False
        if any(i.pid is not None for i in self.instances):
            return False
        return any(t in line for line in failure.cause.engine_lines
                   for t in self.backend.start_transients)

    # ---- state -----------------------------------------------------------------------------
    def _to(self, state: JobState) -> None:
        if state is self.state:
            return
        if state not in TRANSITIONS.get(self.state, ()):
            raise AssertionError(f"job state {self.state.value} -> {state.value}")
        debug("job %s -> %s", self.state.value, state.value)
        self.state = state

    def _report(self, inst: Instance, how: str, detail: str = "") -> None:
        """Open world: tell the owner how ``inst`` ended (once)."""
        inst.start_by = inst.kill_at = None
        if self._world is not None:
            self._world.on_end(inst, how, detail)

    def _fail(self, failure: Failure) -> None:
        """The first failure is the job's; it stops the job."""
        if self._failure is not None or self._signal is not None or \
                self._stop_reason is not None or self.state in (JobState.DRAINING,) + FINAL:
            return
        self._failure = failure
        running = sum(1 for i in self.instances if not i.settled)
        other = "the other " if failure.cause.instance is not None else ""
        self.router.say(f"poprun-lite: {failure.cause.headline}" + (
            f" Stopping {other}{running} instance(s)." if running else ""))
        self._begin_stop(signal.SIGTERM)

    # ---- starting ----------------------------------------------------------------------------
    def _start_all(self) -> None:
        launches_remote = any(not i.host.local for i in self.plan.instances) or \
            (self._world is not None and self._world.remote)
        # The engine fast_start started while the launcher loaded, if it is this job's command.
        early = fast_start.take(self.backend, self.plan)
        if early is not None:
            self._secret = early.secret
        wiring = self._wiring = Wiring(early.listen(self._hub) if early is not None else
                        self._hub.listen_unix(self._secret[:8]),
                        self._hub.listen_tcp(self.plan.rendezvous_address)
                        if launches_remote else None, self.plan.start_timeout)
        # an open world starts empty: its instances come one by one (add_instance)
        launches = self.backend.launches(self.plan, wiring, self._secret) \
            if self._world is None else []
        if self.plan.evaluator:
            launches.append(Launch("evaluator", (self.plan.num_instances,)))
        if not any(launch.argv for launch in launches) and self._hub.unix_dir is not None \
                and self._world is None:
            self._hub.close_listeners(unix_only=True)
        self._stdin.setup()
        for launch in launches:
            if launch.argv is None:
                self._fork(launch)
            else:
                self._spawn(launch, early)
            if self._failure is not None:
                break
        if self._rendezvous_socket is not None:
            self._sel.register(self._rendezvous_socket, selectors.EVENT_READ, ("rendezvous",))

    def _spec(self, index: int) -> dict:
        env = {"PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
        own = self.instances[index].env
        env.update(own if own is not None else self.plan.instance_env(index)
                   if index < self.plan.num_instances else self.plan.evaluator_env())
        return {"argv": list(self.plan.program), "env": env, "cwd": os.getcwd(),
                "stdin": index == 0 and self._world is None}

    def _fork(self, launch: Launch) -> None:
        """A wrapper on this host: a fork of the launcher running the wrapper's code."""
        index = launch.instances[0]
        spec = self._spec(index)
        # Here, not at the top: only local wrappers need it (mpi's run as their own processes).
        from popdist_launcher.launcher.spawned import instance as wrapper
        wrapper._prctl()  # loads libc before the fork, not once per child
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
        conn = self._hub.add(parent, index)
        inst = self.instances[index]
        inst.conn, inst.state, inst.launch = conn, InstanceState.CONNECTED, started
        if index == 0:
            self._stdin.flush()

    def _spawn(self, launch: Launch, early: Optional[fast_start.EarlyEngine] = None) -> None:
        debug("starting %s: %s", launch.label, " ".join(launch.argv))
        try:
            popen = early.process if early is not None else subprocess.Popen(
                list(launch.argv), env=launch.env, stdin=subprocess.PIPE if launch.stdin else
                subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                process_group=0, close_fds=True)
        except OSError as exc:
            cause = report.Cause(f"{launch.label} could not be started: {exc.strerror or exc}.")
            if self._world is not None:
                for index in launch.instances:
                    self.instances[index].state = InstanceState.LOST
                    self._report(self.instances[index], "start-failed", cause.headline)
                return
            self._fail(Failure(cause, 126 if isinstance(exc, PermissionError) else 127, "engine"))
            return
        if self._watchdog is None:
            self._watchdog = processes.Watchdog()
        self._watchdog.watch(popen.pid)
        started = Started(launch, popen.pid, popen)
        self._track(started)
        for index in launch.instances:
            self.instances[index].launch = started
        if launch.stdin:
            try:
                popen.stdin.write(launch.stdin)
                popen.stdin.close()
            except OSError:
                pass
        for fd in (popen.stdout.fileno(), popen.stderr.fileno()):
            os.set_blocking(fd, False)
            self._sel.register(fd, selectors.EVENT_READ, ("engine-out", started))

    def _track(self, started: Started) -> None:
        self._started.append(started)
        self._sel.register(started.pidfd, selectors.EVENT_READ, ("exit", started))

    # ---- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while self.state not in FINAL:
            now = time.monotonic()
            self._on_deadlines(now)
            self._advance()
            if self.state in FINAL:
                break
            deadlines = [d for d in (self._start_deadline, self._job_deadline,
                                     self._kill_deadline, self._unresponsive_deadline,
                                     self._drain_deadline, self.router.held_deadline,
                                     self._stacks.deadline, self._instance_deadline())
                         if d is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for key, mask in self._sel.select(timeout):
                # By descriptor: an earlier event of this batch may have closed this one's
                # socket (a lost host takes its other connections), whose fileno() is then -1.
                if self._sel.get_map().get(key.fd) is not key:
                    continue  # unregistered by an earlier event of this batch
                kind = key.data[0]
                if kind == "conn":
                    conn = key.data[1]
                    if mask & selectors.EVENT_WRITE:
                        self._hub.write(conn)
                    if mask & selectors.EVENT_READ and not conn.closed:
                        self._read(conn)
                elif kind == "engine-out":
                    self._engine_output(key.fd, key.data[1])
                elif kind == "exit":
                    self._on_process_exit(key.data[1])
                elif kind == "listen":
                    self._hub.accept(key.fileobj)
                elif kind == "signal":
                    self._on_signals(key.fileobj)
                elif kind == "stdin":
                    self._stdin.on_readable()
                elif kind == "rendezvous":
                    self._start_rendezvous()
                elif kind == "watch":
                    key.data[1]()

    def _instance_deadline(self) -> Optional[float]:
        """Open world: the nearest start or kill deadline of one instance."""
        if self._world is None:
            return None
        found = [d for i in self.instances if not i.settled for d in (i.start_by, i.kill_at)
                 if d is not None]
        return min(found) if found else None

    def _on_instance_deadlines(self, now: float) -> None:
        for inst in self.instances:
            if inst.settled:
                continue
            if inst.start_by is not None and now >= inst.start_by:
                self._lose(inst, f"did not start within --start-timeout "
                                 f"{self.plan.start_timeout:g} s", "start-failed")
            elif inst.kill_at is not None and now >= inst.kill_at:
                if inst.killed or inst.conn is None:
                    self._lose(inst, "did not answer SIGKILL" if inst.killed else
                               "was stopped before its wrapper connected")
                    continue
                inst.killed = True
                inst.kill_at = now + UNRESPONSIVE_SECONDS
                self._signal_instance(inst, signal.SIGKILL)

    def _on_deadlines(self, now: float) -> None:
        self.router.show_held(now)
        if self._world is not None:
            self._on_instance_deadlines(now)
        if self._start_deadline is not None and now >= self._start_deadline:
            self._start_deadline = None
            self._on_start_timeout()
        if self._job_deadline is not None and now >= self._job_deadline:
            self._job_deadline = None
            if self.state in (JobState.STARTING, JobState.RUNNING):
                self.router.say(f"poprun-lite: --timeout {self._timeout:g} s expired; collecting "
                                f"every instance's Python stacks, then stopping the job.")
                self._collect_stacks(f"--timeout {self._timeout:g} s expired", "timeout")
        if self._stacks.dump is not None and now >= self._stacks.dump.deadline:
            self._finish_dump()
        if self._kill_deadline is not None and now >= self._kill_deadline:
            self._kill_deadline = None
            self._kill_everything()
        if self._unresponsive_deadline is not None and now >= self._unresponsive_deadline:
            self._unresponsive_deadline = None
            for inst in self.instances:
                if not inst.settled:
                    self._lose(inst, "did not answer SIGKILL")
            for started in self._started:
                if started.engine and started.returncode is None:
                    processes.signal_group(started.pid, signal.SIGKILL)
        if self._drain_deadline is not None and now >= self._drain_deadline:
            self._drain_deadline = None
            for conn in self._hub.conns:
                self._hub.close(conn)
            for started in self._started:
                if started.returncode is None:
                    processes.signal_group(started.pid, signal.SIGKILL)
                    self._reap(started, block=True)

    def _advance(self) -> None:
        """Move the job on once what it waits for has happened."""
        if self.state is JobState.STARTING and all(
                i.state in (InstanceState.RUNNING, InstanceState.EXITED) for i in self.instances):
            self._start_deadline = None
            self._to(JobState.RUNNING)
        if self.state in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING):
            for inst in self.instances:  # never connected, and nothing left that could start it
                if inst.state is InstanceState.PENDING and inst.launch is not None \
                        and inst.launch.returncode is not None:
                    inst.state = InstanceState.LOST
                    self._report(inst, "start-failed", f"{inst.launch.launch.label} ended")
            if all(i.settled for i in self.instances) and not self._world_open:
                self._begin_drain()
        if self.state is JobState.DRAINING:
            if all(c.closed for c in self._hub.conns) and \
                    all(s.returncode is not None for s in self._started):
                self._finish()

    # ---- wrapper connections -----------------------------------------------------------------
    def _read(self, conn: Conn) -> None:
        frames = self._hub.receive(conn)
        if frames is None:  # the connection ended
            if conn.index is not None:
                inst = self.instances[conn.index]
                for stream in (STDOUT, STDERR):
                    self.router.close(inst.index, stream)
                if not inst.settled and conn.timed_out:
                    self._lose(inst, f"was lost: its host stopped answering (no reply to the "
                                     f"connection's keepalive for {p.LOST_AFTER_S} s)",
                               host_gone=True)
                elif not inst.settled:
                    self._lose(inst, "lost its wrapper (the connection closed without an exit "
                                     "status)")
            return
        for kind, payload in frames:
            if conn.index is None:
                if kind != p.HELLO or not self._hello(conn, payload):
                    self._hub.close(conn)
                    return
                continue
            self._on_frame(self.instances[conn.index], kind, payload)

    def _hello(self, conn: Conn, payload: bytes) -> bool:
        try:
            index_text, mac, _, _, theirs = payload.decode("ascii").split()[:5]
            index, their_challenge = int(index_text), bytes.fromhex(theirs)
            good = 0 <= index < len(self.instances) and \
                p.mac_ok(self._secret.encode(), conn.challenge, index, mac)
        except (ValueError, UnicodeDecodeError):
            good, index = False, -1
        if not good:
            self.router.say("poprun-lite: warning: refused a connection that did not prove it "
                            "belongs to this job.")
            return False
        inst = self.instances[index]
        if inst.state is not InstanceState.PENDING:
            self.router.say(f"poprun-lite: warning: instance {index} connected twice; "
                            f"refused the second.")
            return False
        conn.index = index
        inst.conn, inst.state = conn, InstanceState.CONNECTED
        run = self.state in (JobState.STARTING, JobState.RUNNING) and not inst.stopped
        spec = self._spec(index)
        proof = p.mac(self._secret.encode(), p.LAUNCHER_PROOF + their_challenge, index).encode()
        self._hub.send(conn, p.SPEC, proof + p.encode_spec(spec["argv"], spec["env"], spec["cwd"],
                                                           spec["stdin"], run))
        if not run:
            inst.state = InstanceState.EXITED  # never started: nothing to wait for
            self._report(inst, "not-started", "stopped before it started")
        if index == 0:
            self._stdin.flush()
        return True

    def _on_frame(self, inst: Instance, kind: int, payload: bytes) -> None:
        if kind == p.STDOUT:
            self.router.feed(inst.index, STDOUT, payload)
        elif kind == p.STDERR:
            self.router.feed(inst.index, STDERR, payload)
        elif kind == p.STARTED:
            inst.pid = int(payload)
            inst.start_by = None
            if inst.state is InstanceState.CONNECTED:
                inst.state = InstanceState.RUNNING
            debug("instance %d runs as pid %d on %s", inst.index, inst.pid, inst.host)
            if self.state is JobState.STOPPING and self._signal is not None:
                self._signal_instance(inst, self._signal)
        elif kind == p.EXIT:
            self._on_exit(inst, int(payload))
        elif kind == p.STACKS:
            self._on_stacks(inst, payload.decode("utf-8", "replace"))
        elif kind == p.STALL:
            reason = payload.decode("utf-8", "replace").strip()
            if self._stacks.dump is None and self.state in (JobState.STARTING, JobState.RUNNING):
                self.router.say(f"poprun-lite: {inst.who} reports a stalled "
                                f"collective ({reason}); collecting every instance's Python "
                                f"stacks.")
                self._collect_stacks(f"{inst.who} reported a stall: {reason}", "stall",
                                     keep=inst.index)

    def _on_exit(self, inst: Instance, returncode: int) -> None:
        inst.returncode = returncode
        inst.state = InstanceState.EXITED
        debug("instance %d %s", inst.index, processes.describe_exit(returncode))
        if inst.index == 0:
            self._stdin.drop()
        self._stacks.ended(inst.index)
        if self._world is not None:
            if inst.conn is not None:  # its wrapper need not wait for the job's end
                self._hub.send(inst.conn, p.RELEASE)
            self._report(inst, "exited")
        elif returncode != 0:
            cause = report.Cause(f"{inst.who} {processes.describe_exit(returncode)} "
                                 f"(host {inst.host}), pid {inst.pid}.", inst.index)
            self._fail(Failure(cause, processes.exit_code_of(returncode), "instance"))

    def _lose(self, inst: Instance, what: str, how: str = "lost",
              host_gone: bool = False) -> None:
        """``inst`` ended without an exit status; in an open world its end is reported (and,
        when its host stopped answering, the other instances there are lost with it)."""
        inst.state = InstanceState.LOST
        if inst.conn is not None:
            self._hub.close(inst.conn)
        if inst.pid is not None and inst.launch is not None and not inst.launch.engine:
            try:  # a wrapper of this host died: its program's group (not a reused pid) goes
                if os.getpgid(inst.pid) == inst.pid:
                    os.killpg(inst.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._world is not None:
            started = inst.launch
            if started is not None and started.engine and started.returncode is None:
                processes.signal_group(started.pid, signal.SIGKILL)  # its ssh client, now
            self._report(inst, how, what)
            for other in self.instances if host_gone else ():
                if other.host == inst.host and not other.settled:
                    self._lose(other, f"was lost with its host {inst.host}")
            return
        cause = report.Cause(f"{inst.who} (host {inst.host}) {what}.", inst.index)
        self._fail(Failure(cause, 1, "lost"))
        if host_gone:  # the host's other instances are as unreachable: lost with it, now
            for other in self.instances:
                if other.host == inst.host and not other.settled:
                    self._lose(other, f"was lost with its host {inst.host}")
            for started in {id(i.launch): i.launch for i in self.instances
                            if i.host == inst.host and i.launch is not None}.values():
                if started.engine and started.returncode is None and all(
                        self.instances[i].settled for i in started.launch.instances):
                    processes.signal_group(started.pid, signal.SIGKILL)  # its ssh client

    # ---- engines and forked wrappers --------------------------------------------------------
    def _engine_output(self, fd: int, started: Started) -> bool:
        """Show and keep an engine's own lines; False once nothing more can be read now."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._sel.unregister(fd)
            rest = started.partial.pop(fd, b"")
            if rest:
                self._engine_lines(started, [rest])
            return False
        data = started.partial.pop(fd, b"") + data
        lines = data.split(b"\n")
        if lines[-1]:
            started.partial[fd] = lines[-1]
        self._engine_lines(started, lines[:-1])
        return True

    def _engine_lines(self, started: Started, lines: List[bytes]) -> None:
        label = started.launch.label
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip("\r")
            started.lines.append(text)
            self.router.say(f"[{label}]: {text}")

    def _on_process_exit(self, started: Started) -> None:
        # Its pidfd is readable: it has ended. Waiting is at once, except under a tracer
        # (strace -f), which may hold the exit status a moment after the pidfd tells.
        self._reap(started, block=True)
        code = started.returncode
        debug("%s %s", started.launch.label, processes.describe_exit(code))
        never = [i for i in started.launch.instances
                 if self.instances[i].state in (InstanceState.PENDING, InstanceState.CONNECTED)]
        if never and self.state in (JobState.STARTING, JobState.RUNNING):
            if started.engine:  # the engine's last words, for the report
                for fd in (started.popen.stdout.fileno(), started.popen.stderr.fileno()):
                    while fd in self._sel.get_map() and self._engine_output(fd, started):
                        pass
            how = self.backend.explain_engine_exit(started.launch, code) or \
                processes.describe_exit(code)
            if self._world is not None:
                for i in never:
                    self._lose(self.instances[i], f"{started.launch.label} {how} before it "
                                                  f"started", "start-failed")
                return
            which = ", ".join(str(i) for i in never)
            hosts = ", ".join(dict.fromkeys(self.instances[i].host for i in never))
            cause = report.Cause(f"{started.launch.label} {how} before instance(s) {which} "
                                 f"started (host(s) {hosts}).", None, tuple(started.lines))
            code = processes.exit_code_of(code) or 1
            for i in never:
                self.instances[i].state = InstanceState.LOST
            self._fail(Failure(cause, code, "engine"))

    def _reap(self, started: Started, block: bool = False) -> None:
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
        self._sel.unregister(started.pidfd)
        os.close(started.pidfd)
        if self._watchdog is not None and started.engine:
            self._watchdog.forget(started.pid)

    # ---- signals -----------------------------------------------------------------------------
    def _on_signals(self, wake: socket.socket) -> None:
        try:
            data = wake.recv(64)
        except BlockingIOError:
            return
        for signum in data:
            if signum == DUMP_SIGNAL:
                if self._stacks.dump is None:
                    self.router.say("poprun-lite: SIGQUIT: collecting every instance's Python "
                                    "stacks (the job goes on).")
                    self._collect_stacks("on request (SIGQUIT to poprun-lite)", "print")
            elif signum in FORWARDED_SIGNALS:
                self._forward(signum)

    def _forward(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum not in STOPPING_SIGNALS:
            debug("forwarding %s", name)
            for inst in self.instances:
                self._signal_instance(inst, signum)
            return
        if self._signal is not None or self.state is JobState.DRAINING:
            self.router.say(f"poprun-lite: {name} again; killing all instances now.")
            self._kill_everything()
            return
        self._signal = signum
        running = sum(1 for i in self.instances if not i.settled)
        self.router.say(f"poprun-lite: received {name}; forwarding it to {running} instance(s) "
                        f"(SIGKILL after {self.plan.grace_period:g} s).")
        self._begin_stop(signum)

    def _signal_instance(self, inst: Instance, signum: int) -> None:
        if inst.conn is not None and not inst.settled:
            self._hub.send(inst.conn, p.SIGNAL, bytes([signum]))

    def _begin_stop(self, signum: int) -> None:
        if self._world_open:  # first, so that nothing starts replacements meanwhile
            self._world_open = False
            self._world.on_stopping()
        self._to(JobState.STOPPING)
        for inst in self.instances:
            if not inst.settled:
                inst.stopped = True
                self._signal_instance(inst, signum)
        self._start_deadline = None
        self._kill_deadline = time.monotonic() + self.plan.grace_period

    def _kill_everything(self) -> None:
        for inst in self.instances:
            self._signal_instance(inst, signal.SIGKILL)
        for started in self._started:  # engines still starting instances
            if started.engine and started.returncode is None and any(
                    self.instances[i].state is InstanceState.PENDING
                    for i in started.launch.instances):
                processes.signal_group(started.pid, signal.SIGKILL)
        self._unresponsive_deadline = time.monotonic() + UNRESPONSIVE_SECONDS

    def _on_start_timeout(self) -> None:
        late = [i for i in self.instances
                if i.state in (InstanceState.PENDING, InstanceState.CONNECTED)]
        if not late or self.state is not JobState.STARTING:
            return
        hosts = list(dict.fromkeys(i.host for i in late))
        which = ", ".join(str(i.index) for i in late)
        hint = f"check that 'ssh {hosts[0]} true' answers, or raise --start-timeout" \
            if any(not self.plan.instances[i.index].host.local for i in late
                   if i.index < self.plan.num_instances) \
            else "raise --start-timeout"
        cause = report.Cause(f"start timeout ({self.plan.start_timeout:g} s) expired: instances "
                             f"{which} on host(s) {', '.join(hosts)} did not start; {hint}.",
                             late[0].index)
        for inst in late:
            if inst.state is InstanceState.PENDING:
                inst.state = InstanceState.LOST
        self._fail(Failure(cause, TIMEOUT_EXIT_CODE, "start-timeout"))

    # ---- stacks ------------------------------------------------------------------------------
    def _collect_stacks(self, reason: str, then: str, keep: Optional[int] = None) -> None:
        running = [i for i in self.instances
                   if i.state is InstanceState.RUNNING and i.conn is not None]
        if self._stacks.collect(running, reason, then, keep):
            self._finish_dump()

    def _on_stacks(self, inst: Instance, text: str) -> None:
        if self._stacks.on_stacks(inst.index, text):
            self._finish_dump()

    def _finish_dump(self) -> None:
        dump = self._stacks.finish()
        if dump is None:
            return
        if dump.then == "print":
            self.router.say(report.stacks_report(self.router.stacks, self._ends()))
        elif dump.then == "timeout":
            cause = report.Cause(f"the job timeout (--timeout {self._timeout:g} s) expired.")
            self._fail(Failure(cause, TIMEOUT_EXIT_CODE, "timeout"))

    # ---- ending ------------------------------------------------------------------------------
    def _begin_drain(self) -> None:
        self._to(JobState.DRAINING)
        self._kill_deadline = self._unresponsive_deadline = self._start_deadline = None
        self._job_deadline = None
        if self._stacks.dump is not None:
            self._finish_dump()
        for conn in self._hub.conns:
            if conn.index is None:
                self._hub.close(conn)
            else:
                self._hub.send(conn, p.RELEASE)
        self._hub.close_listeners()
        self._drain_deadline = time.monotonic() + DRAIN_SECONDS

    def _finish(self) -> None:
        if self._failure is not None:
            self._to(JobState.FAILED)
        elif self._signal is not None:
            self._to(JobState.INTERRUPTED)
        elif self._stop_reason is not None:
            self._to(JobState.STOPPED)
        else:
            self._to(JobState.SUCCEEDED)

    def _ends(self) -> Dict[int, report.InstanceEnd]:
        ends = {}
        for inst in self.instances:
            how = {InstanceState.LOST: "lost", InstanceState.EXITED: "exited"}.get(
                inst.state, "not started")
            if inst.state is InstanceState.EXITED and inst.returncode is None:
                how = "not started"
            if how == "exited" and inst.stopped and inst.returncode != 0:
                how = "stopped"
            if inst.state is InstanceState.LOST and inst.pid is None:
                how = "not started"
            ends[inst.index] = report.InstanceEnd(inst.index, inst.host, inst.pid,
                                                  inst.returncode, how, inst.name)
        return ends

    def _cleanup(self) -> None:
        for conn in self._hub.conns:
            self._hub.close(conn)
        for started in self._started:
            if started.returncode is None:
                processes.signal_group(started.pid, signal.SIGKILL)
                if not started.engine:
                    try:
                        os.kill(started.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._reap(started, block=True)
            if started.popen is not None:
                for pipe in (started.popen.stdout, started.popen.stderr):
                    pipe.close()
        self._hub.close_all()
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
        self._sel.close()

    def _result(self) -> JobResult:
        failure = self._failure
        if failure is not None:
            tails = {i.index: {STDERR: self.router.tail(i.index, STDERR),
                               STDOUT: self.router.tail(i.index, STDOUT)} for i in self.instances}
            stacks = self.router.stacks if self._stacks.in_report else {}
            self.router.say(report.failure_report(failure.cause, self._ends(), tails, stacks,
                                                  self.failure_title))
            return JobResult(JobState.FAILED, failure.exit_code, failure.cause.instance,
                             self._signal)
        if self._signal is not None:
            return JobResult(JobState.INTERRUPTED, 128 + self._signal, None, self._signal)
        if self._stop_reason is not None:
            return JobResult(JobState.STOPPED, 0, None, None)
        return JobResult(JobState.SUCCEEDED, 0, None, None)

    # ---- rendezvous --------------------------------------------------------------------------
    def _start_rendezvous(self) -> None:
        sock = self._rendezvous_socket
        self._sel.unregister(sock)
        slots = json.dumps(self.plan.horovod_slots(), separators=(",", ":"))
        allowed = json.dumps(sorted({h.address for h in self.plan.hosts}))
        debug("first rendezvous connection: starting Horovod's rendezvous server")
        self._rendezvous_proc = subprocess.Popen(
            [sys.executable, "-m", "popdist_launcher.launcher.spawned.rendezvous",
             str(sock.fileno()), slots,
             allowed],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(sock.fileno(),),
            process_group=0, close_fds=True,
            env={**os.environ, rendezvous.SECRET_ENV: self.plan.rendezvous_secret})
        sock.close()  # the helper owns it now; if it dies, clients see a reset, not a hang
        self._rendezvous_socket = None


def _ignore(signum, frame) -> None:  # the wakeup fd carries the signal to the loop
    pass
