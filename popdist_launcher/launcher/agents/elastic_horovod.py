"""Horovod elastic jobs: Horovod's ElasticDriver runs in a helper process
(``elastic/helper/elastic_driver.py``, ``elastic/driver_link.py``) and asks for workers; the
launcher starts each one through the backend and its wrapper (an open-world Supervisor), tells
the driver how each ended, and keeps the hosts the driver sees current (discovery script, host
probes, lost hosts). In the agent shape (``fixed_world.py``) the whole job is one attempt: the
driver re-forms the workers at each reset (a round), and the agent decides the exit code at the
end. The agent (``HorovodAgent``) opens the job; the part that runs it (``HorovodRun``) holds
its parts from the start, owns the open world and calls it. What a failure means for its host
is the failure policy's (``elastic/failure_policy.py``), which the driver helper asks with the
job's progress mark (the commits the workers reported); a hung worker (``--hang-timeout``,
``hang/``) ends as a dead one; the helper's heartbeat bounds a stopped or stuck helper
(DRIVER_SILENT_S).

Every membership change is one line on the console and in ``--output-dir/membership.log``;
worker ``w`` is tagged ``[w]`` and logged in ``attempt-<round>/instance-<w>.std{out,err}.log``
(the registration round it started in); the final summary lists every round.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Type

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.layout import ports
from popdist_launcher.launcher.supervision import processes
from popdist_launcher.launcher.agents.fixed_world import Agent
from popdist_launcher.launcher.agents.horovod_job import HorovodJob, JobEvents, Where, open_job
from popdist_launcher.launcher.supervision.attempt import Instance, JobResult
from popdist_launcher.launcher.elastic.horovod_env import JobEnv, worker_env
from popdist_launcher.launcher.elastic.horovod_hosts import Hosts
from popdist_launcher.launcher.elastic.horovod_rounds import Ending, Round, Worker, summary
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output.routing import LogFiles
from popdist_launcher.launcher.layout.remote import RemoteError, resolve
from popdist_launcher.launcher.spawned import peer_sockets
from popdist_launcher.launcher.layout.topology import LOOPBACK, TopologyError, launcher_address
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire.protocol import CUT_PEERS

LOST_CODE = 255       # the exit code the driver records for a lost worker (as ssh's)
NOT_RUN_CODE = 1      # ... for one that never ran
HEARTBEAT_S = frames.Alive.HEARTBEAT_S  # the driver helper's heartbeat (its ALIVE frames)
DRIVER_SILENT_S = 10.0  # no message for this long: the helper is stopped or stuck


class HorovodAgent(Agent):
    """The agent of an elastic job in Horovod mode: it chooses the launcher's address, opens
    the job (``horovod_job.open_job``) into a HorovodRun, runs it and prints its summary. Raises
    TopologyError and PortError (one sentence) from ``run`` when the launcher's address cannot
    be chosen or bound."""

    def __init__(self, options: JobOptions) -> None:
        super().__init__(options)
        self.secret = rendezvous.new_secret()  # one for the whole job: survivors keep theirs

    # ---- the job: one attempt; the driver re-forms the workers at each reset -----------------
    def _attempt(self, root_fd: Optional[int]) -> int:
        """The whole job: open it, run its Supervisor, close it; the exit code, after the
        summary of every round."""
        options, elastic = self.options, self.options.elastic
        initial = [(str(h), int(n)) for h, n in elastic.hosts]
        remote = [h for h, _ in initial if not hostlib.is_local(h)]
        # a discovery script may add other hosts later, unless the backend is local
        multi_host = bool(remote) or (elastic.discovery_script is not None and
                                      self.layout.backend.name != "local")
        address, iface = self._choose_address(remote, multi_host)
        listener = ports.listen_socket(address)
        try:
            run = HorovodRun(options, self.job_id, self.secret, root_fd, functools.partial(
                open_job, options, self.job_id, self.secret,
                Where(address, iface, initial, remote, multi_host), listener))
        finally:
            listener.close()  # the helper has it now
        try:
            result = run.start(initial).supervisor.run()
        finally:
            run.close()
        code, text = run.verdict(result)
        console.write(text)
        return code

    def _choose_address(self, remote: Sequence[str], multi_host: bool) -> Tuple[str, str]:
        """The launcher's address every host reaches (rendezvous, wrappers' connections), and
        its interface."""
        layout = self.layout
        if not multi_host:
            if layout.subnet or layout.iface:
                return launcher_address(layout.subnet, layout.iface, None)
            return LOOPBACK, "lo"
        peer = None
        if remote:
            try:
                peer = resolve(remote[0], layout.ssh)
            except RemoteError as exc:
                raise TopologyError(str(exc)) from None
        return launcher_address(layout.subnet, layout.iface, peer)


class HorovodRun:
    """One Horovod job while it runs: its parts (``job``, opened by ``open_parts`` with this run
    as their events, so never missing), the workers and rounds the driver asked for, and how the
    job is ending. What is optional says so: ``root_fd`` (no --output-dir), ``fatal`` (the
    launcher gave up) and ``done`` (the driver's result)."""

    def __init__(self, options: JobOptions, job_id: str, secret: str, root_fd: Optional[int],
                 open_parts: Callable[[JobEvents], HorovodJob]) -> None:
        self.options = options
        self.elastic = options.elastic
        self.job_id = job_id
        self.secret = secret
        self.root_fd = root_fd
        self.workers: Dict[int, Worker] = {}
        self.by_index: Dict[int, Worker] = {}
        self.rounds: List[Round] = []
        self.logs: Dict[int, LogFiles] = {}
        self.fatal: Optional[str] = None
        self.done: Optional[frames.Done] = None
        self.cut_peers = os.environ.get(peer_sockets.SWITCH_ENV, "1") != "0"
        self.cut_rounds: Set[int] = set()  # the rounds whose survivors were cut
        self.mark = 0  # progress reports (commits) seen: the failure policy's progress mark
        self.heard = time.monotonic()  # the driver helper's last message (its heartbeat)
        self.job = open_parts(self)  # last: its parts call back into what is set above

    def start(self, initial: Hosts) -> HorovodJob:
        """The job is open: log its start, probe its hosts, poll the discovery script."""
        job, elastic = self.job, self.elastic
        self.heard = time.monotonic()
        job.log.record(f"elastic job (Horovod's driver, backend "
                       f"{self.options.layout.backend.name}): "
                       f"hosts {hostlib.host_text(initial) or 'none'}; "
                       f"-np {self.options.num_instances}, --min-np {elastic.min_np}, --max-np "
                       f"{elastic.max_np if elastic.max_np is not None else 'every slot'}")
        job.probes.refresh()
        job.poller.start()
        job.poller.watch(job.supervisor.watch, self.on_poll)
        return job

    def verdict(self, result: JobResult) -> Tuple[int, str]:
        """The job's exit code and the summary of every round, once its Supervisor ended."""
        return summary(self.rounds, self.workers,
                       Ending(result, self.fatal, self.done, self.job.probes.lost,
                              self.elastic.min_np),
                       self.job.router)

    def close(self) -> None:
        self.job.close()
        for logs in self.logs.values():
            logs.close()

    # ---- the driver ---------------------------------------------------------------------------
    def _send(self, frame: frames.Frame) -> None:
        if not self.job.driver.send(frame):
            self._give_up("the elastic driver (helper process) stopped reading the launcher's "
                          "messages")

    def push_hosts(self, hosts: Hosts) -> None:
        """The usable hosts, to the driver."""
        self._send(frames.Hosts(hosts=[[n, s] for n, s in hosts]))

    def allow(self, addresses: List[str]) -> None:
        """A new host's addresses, whose workers' connections the rendezvous accepts."""
        self._send(frames.Allow(addresses=addresses))

    def deadline(self) -> Optional[float]:
        """The driver helper's heartbeat is due by then (while its socket is open)."""
        if self.job.driver.sock is None:
            return None
        return self.heard + DRIVER_SILENT_S

    def expired(self, now: float) -> None:
        """No message from the driver helper for DRIVER_SILENT_S: it is stopped or stuck."""
        if self.done is None and self.fatal is None:
            self.job.close_driver_socket()
            self._give_up(f"the elastic driver (helper process, pid {self.job.driver.helper.pid})"
                          f" sent nothing for {DRIVER_SILENT_S:g} s (its heartbeat comes every "
                          f"{HEARTBEAT_S:g} s): it is stopped or stuck.")

    def progressed(self, inst: Instance, step: int) -> None:
        """A worker reported progress (a commit)."""
        self.mark += 1

    def on_driver(self) -> None:
        """The driver helper's socket is readable."""
        self.heard = time.monotonic()
        received = self.job.driver.read()
        if received is None:
            self.job.close_driver_socket()
            if self.done is None and self.fatal is None:
                code = self.job.driver.exit_status()
                self._give_up("the elastic driver (helper process) ended without a result"
                              + (f" ({report.describe_exit(code)})" if code is not None else ""))
            return
        for frame in received:
            self.on_frame(frame)

    def on_frame(self, frame: frames.Frame) -> None:
        """One frame from the driver helper (a record of ``wire/helper_frames.py``), to the
        handler of its type (``FRAMES``); the launcher's own kinds have none."""
        handler = FRAMES.get(type(frame))
        if handler is not None:
            handler(self, frame)

    def _on_stop(self, frame: frames.Stop) -> None:
        worker = self.workers.get(frame.wid)
        if worker is not None:
            self.job.world.stop_instance(worker.inst)

    def _on_blacklist(self, frame: frames.Blacklist) -> None:
        how_long = "for the rest of the job" if frame.cooldown is None else \
            f"for {float(frame.cooldown):.1f} s (--blacklist-cooldown-range)"
        if frame.forever:
            how_long += (f" (it failed --host-failure-limit {frame.limit} times in a "
                         f"row without progress)")
        self.event(f"{frame.host} blacklisted {how_long}")

    def _on_retry(self, frame: frames.Retry) -> None:
        self.event(f"{frame.sentence}: instance {frame.wid}'s slot is started again "
                   f"(the other hosts cannot carry --min-np {self.elastic.min_np})")

    def _on_fatal(self, frame: frames.Fatal) -> None:
        self.fatal = frame.reason
        self.job.supervisor.request_stop(f"the elastic job cannot go on: {self.fatal}")

    def _on_alive(self, frame: frames.Alive) -> None:
        pass  # the heartbeat: self.heard is set on every read

    def _on_done(self, frame: frames.Done) -> None:
        self.done = frame
        self.job.close_driver_socket()
        self.job.world.close()

    def _give_up(self, why: str) -> None:
        self.fatal = why
        self.job.supervisor.request_stop(why)

    def _on_round(self, frame: frames.Round) -> None:
        self.job.supervisor.new_round()  # its workers may be starting
        new = Round(frame.round, frame.size, frame.hosts)
        previous = self.rounds[-1] if self.rounds else None
        self.rounds.append(new)
        change = "" if previous is None else \
            f" (was {previous.size} on {previous.layout})"
        self.job.log.record(f"round {new.number}: {new.size} instance(s) on {new.layout}{change}")

    def _on_start(self, frame: frames.Start) -> None:
        wid, round_number = frame.wid, frame.round
        host = self.job.probes.usable(frame.hostname)
        if host is None:  # lost since the driver last saw HOSTS
            self._send(frames.Exited(wid=wid, code=NOT_RUN_CODE, how="start-failed",
                                     blame="host"))
            return
        logs = None
        if self.root_fd is not None:
            logs = self.logs.get(round_number)
            if logs is None:
                logs = self.logs[round_number] = LogFiles(
                    self.root_fd, self.options.output.output_dir, round_number)
        worker = self.workers[wid] = Worker(frame)
        world = self.job.world
        worker.inst = world.register(host, worker_env(frame, host.iface, self.job_env()),
                                     str(wid), logs)
        self.by_index[worker.inst.index] = worker  # its end may be reported by start
        world.start(worker.inst, host)

    def job_env(self) -> JobEnv:
        """What every worker's environment shares (``horovod_env.py``)."""
        options = self.options
        return JobEnv(self.job_id, options.replicas_per_instance, options.ipus_per_replica,
                      self.job.supervisor.rendezvous, self.secret, options.placement,
                      tuple(options.exported_env))

    # ---- workers' ends ------------------------------------------------------------------------
    def worker_ended(self, inst: Instance, how: str, detail: str) -> None:
        """The open world reports how ``inst`` ended (exactly once)."""
        worker = self.by_index[inst.index]
        worker.inst = inst
        worker.ended_round = self.rounds[-1].number if self.rounds else 0
        worker.how, worker.detail = how, detail
        if how == "exited":
            worker.code = processes.exit_code_of(inst.returncode)
        else:
            worker.code = LOST_CODE if how == "lost" else NOT_RUN_CODE
        worker.blame = self._blame(worker)
        if worker.blame != "none" and how in ("exited", "lost"):
            self._cut_survivors(worker)  # before the driver can start a round without it
        self._send(frames.Exited(wid=worker.wid, code=worker.code, how=how,
                                 blame=worker.blame, what=worker.describe(), mark=self.mark))
        where = f"instance {worker.wid} (rank {worker.rank} of {worker.size}) on " \
                f"{worker.hostname}"
        if worker.blame == "none":
            if how == "exited" and worker.code != 0 and not inst.stopped:
                self.event(f"{where} {worker.describe()} after its host left the job")
            return
        if how == "lost":
            if self.job.probes.lose(worker.hostname, detail):
                self.event(f"{worker.hostname} lost: {where} {detail}")
                self.job.probes.refresh()
            else:
                self.event(f"{where} {detail}")
        elif how == "start-failed":
            self.event(f"{where} could not start: {detail}")
        else:
            self.event(f"{where} {worker.describe()}")

    def _cut_survivors(self, failed: Worker) -> None:
        """A worker of the current round failed: every running worker's wrapper shuts down its
        program's connections to the job's workers, so a collective blocked on a peer fails now
        rather than after the Gloo timeout (peer_sockets.py). Once a round: the survivors are
        unblocked by the first cut, and a later one could reach them while they connect to the
        next round's peers (Gloo aborts the process on a connection closed during its set-up);
        never for a worker whose host the current round no longer has (it ended after the next
        round formed without it)."""
        current = self.rounds[-1] if self.rounds else None
        if not self.cut_peers or current is None or current.number in self.cut_rounds or \
                failed.hostname not in dict(current.hosts):
            return
        self.cut_rounds.add(current.number)
        payload = peer_sockets.notice(self.job.supervisor.rendezvous,
                                      [h.address for h in self.job.probes.hosts.values()])
        for other in self.workers.values():
            if other.inst is not None and other.ended_round is None:
                self.job.world.send_to(other.inst, CUT_PEERS, payload)

    def _blame(self, worker: Worker) -> str:
        """Who the driver should blame: "none" (stopped, or a success), "host" (lost, or could
        not start there: the host itself failed), "slot" (the program failed or hung on a live
        host). What follows is the failure policy's (``failure_policy.py``), in the driver
        helper."""
        if worker.inst.stopped or worker.code == 0:
            return "none"
        if worker.how != "exited":
            return "host"
        if worker.hostname not in dict(self.job.probes.pushed or ()):  # removed (drained): Horovod
            return "none"  # ends its workers on purpose
        return "slot"

    def stopping(self) -> None:
        """The job is stopping (a signal, --timeout, FATAL): no replacement may start."""
        self.job.close_driver_socket()

    def event(self, text: str) -> None:
        """A membership event: on the console, in the membership log, in the round's summary."""
        self.job.log.record(text)
        if self.rounds:
            self.rounds[-1].events.append(f"{time.strftime('%H:%M:%S')} {text}")

    # ---- hosts --------------------------------------------------------------------------------
    def on_poll(self) -> None:
        """The discovery script answered."""
        job = self.job
        for answer in job.poller.read():
            change = job.membership.on_answer(answer)
            if change.warning:
                job.log.record(f"warning: {change.warning}")
            for name in change.added:
                self.event(f"{name} added by the discovery script")
            for name in change.removed:
                self.event(f"{name} removed by the discovery script")
        job.probes.refresh()


# the driver helper's frames (wire/helper_frames.py's TO_LAUNCHER), each type to its handler
FRAMES: Dict[Type[Any], Callable[[HorovodRun, Any], None]] = {
    frames.Round: HorovodRun._on_round, frames.Start: HorovodRun._on_start,
    frames.Stop: HorovodRun._on_stop, frames.Blacklist: HorovodRun._on_blacklist,
    frames.Retry: HorovodRun._on_retry, frames.Fatal: HorovodRun._on_fatal,
    frames.Alive: HorovodRun._on_alive, frames.Done: HorovodRun._on_done,
}
