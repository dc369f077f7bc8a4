"""Horovod elastic jobs: Horovod's ElasticDriver runs in a helper process
(``spawned/elastic_driver.py``, ``driver_link.py``) and asks for workers; the agent starts each
one through the backend and its wrapper (an open-world Supervisor), tells the driver how each
ended, and keeps the hosts the driver sees current (discovery script, host probes, lost hosts).
In the agent shape (``agent.py``) the whole job is one attempt: the driver re-forms the workers
at each reset (a round), and the agent decides the exit code at the end. The agent owns the open
world and calls it; what a failure means for its host is the failure policy's (``failure_policy.py``),
which the driver helper asks with the job's progress mark (the commits the workers reported);
a hung worker (``--hang-timeout``, ``hang.py``) ends as a dead one; the helper's heartbeat
bounds a stopped or stuck helper (DRIVER_SILENT_S).

Every membership change is one line on the console and in ``--output-dir/membership.log``;
worker ``w`` is tagged ``[w]`` and logged in ``attempt-<round>/instance-<w>.std{out,err}.log``
(the registration round it started in); the final summary lists every round.
"""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

from popdist_launcher import _contract as c
from popdist_launcher.launcher import hosts as hostlib
from popdist_launcher.launcher import console, ports, processes
from popdist_launcher.launcher.agent import Agent
from popdist_launcher.launcher.attempt import Instance, JobResult
from popdist_launcher.launcher.elastic.discovery.poller import Poller
from popdist_launcher.launcher.elastic.driver_link import DriverLink
from popdist_launcher.launcher.elastic.horovod_hosts import HostProbes
from popdist_launcher.launcher.elastic.horovod_rounds import Ending, Round, Worker, summary
from popdist_launcher.launcher.elastic.membership import Blacklist, Membership, MembershipLog
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output import LogFiles, Router
from popdist_launcher.launcher.plan import Host, LaunchPlan
from popdist_launcher.launcher.remote import RemoteError, resolve
from popdist_launcher.launcher.spawned import peer_sockets
from popdist_launcher.launcher.supervisor import Supervisor
from popdist_launcher.launcher.topology import LOOPBACK, TopologyError, launcher_address
from popdist_launcher.launcher.world import OpenWorld
from popdist_launcher.wire import placement_text as placing
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire.helper_settings import HelperSettings
from popdist_launcher.wire.protocol import CUT_PEERS, UNSET_ENV

GLOO_TIMEOUT_S = 30   # HOROVOD_GLOO_TIMEOUT_SECONDS unless -x sets it: how long survivors wait
#                       in a collective for a peer that stopped answering
LOST_CODE = 255       # the exit code the driver records for a lost worker (as ssh's)
NOT_RUN_CODE = 1      # ... for one that never ran
DISCOVERY_INTERVAL_S = 1.0  # horovodrun's
DISCOVERY_TIMEOUT_S = 10.0
HEARTBEAT_S = 1.0  # the driver helper's heartbeat (spawned/elastic_driver.py sends ALIVE)
DRIVER_SILENT_S = 10.0  # no message for this long: the helper is stopped or stuck


class HorovodAgent(Agent):
    """The agent of an elastic job in Horovod mode: the helper, the open-world Supervisor,
    the hosts. Raises TopologyError and PortError (one sentence) from ``run`` when the
    launcher's address cannot be chosen or bound."""

    def __init__(self, options: JobOptions) -> None:
        super().__init__(options)
        self.elastic = options.elastic
        self.secret = rendezvous.new_secret()  # one for the whole job: survivors keep theirs
        self.workers: Dict[int, Worker] = {}
        self.by_index: Dict[int, Worker] = {}
        self.rounds: List[Round] = []
        self.logs: Dict[int, LogFiles] = {}
        self.fatal: Optional[str] = None
        self.done: Optional[dict] = None
        self.driver: Optional[DriverLink] = None
        self.world: Optional[OpenWorld] = None  # the job's open world; the agent calls it
        self.root_fd: Optional[int] = None
        self.router: Optional[Router] = None
        self.log: Optional[MembershipLog] = None
        self.poller: Optional[Poller] = None
        self.membership: Optional[Membership] = None
        self.probes: Optional[HostProbes] = None
        self.address, self.iface = LOOPBACK, "lo"
        self.cut_peers = os.environ.get(peer_sockets.SWITCH_ENV, "1") != "0"
        self.cut_round: Optional[int] = None  # the round whose survivors were cut last
        self.mark = 0  # progress reports (commits) seen: the failure policy's progress mark
        self.heard = time.monotonic()  # the driver helper's last message (its heartbeat)

    # ---- the job: one attempt; the driver re-forms the workers at each reset -----------------
    def _start_and_monitor(self, root_fd: Optional[int]) -> JobResult:
        options, elastic = self.options, self.elastic
        self.root_fd = root_fd
        initial = [(str(h), int(n)) for h, n in elastic.hosts]
        remote = [h for h, _ in initial if not hostlib.is_local(h)]
        # a discovery script may add other hosts later, unless the backend is local
        multi_host = bool(remote) or (elastic.discovery_script is not None and
                                      self.layout.backend.name != "local")
        self._choose_address(remote, multi_host)
        listener = ports.listen_socket(self.address)
        try:
            self.router = Router(0, options.output)
            self.log = MembershipLog(options.output.output_dir)
            self.world = OpenWorld(self._ended, self._stopping, remote=multi_host,
                                   on_progress=self._progressed, timer=self)
            self.supervisor = Supervisor(self._base_plan(listener.getsockname()[1]),
                                         self.layout.backend, self.router,
                                         timeout=options.timeout,
                                         hang_timeout=options.hang_timeout, world=self.world)
            self.driver = DriverLink(listener, self._driver_settings(initial), self.secret)
            self.heard = time.monotonic()
            self.supervisor.watch(self.driver, self._on_driver)
            listener.close()
            listener = None
            if elastic.discovery_script:
                self.poller = Poller(elastic.discovery_script, elastic.slots_per_host,
                                     interval=DISCOVERY_INTERVAL_S,
                                     timeout=min(DISCOVERY_TIMEOUT_S, options.start_timeout))
            self.membership = Membership(initial, Blacklist(None), self.poller)
            self.probes = HostProbes(
                self.layout, self.address, self.iface, self.membership.usable,
                push=lambda hosts: self._send(frames.Hosts(hosts=[[n, s] for n, s in hosts])),
                allow=lambda addresses: self._send(frames.Allow(addresses=addresses)),
                event=self._event, watch=self.supervisor.watch, unwatch=self.supervisor.unwatch,
                initial=remote)
            self.log.record(f"elastic job (Horovod's driver, backend {self.layout.backend.name}): "
                            f"hosts {_layout(initial)}; "
                            f"-np {options.num_instances}, --min-np {elastic.min_np}, --max-np "
                            f"{elastic.max_np if elastic.max_np is not None else 'every slot'}")
            self.probes.refresh()
            if self.poller is not None:
                self.poller.start()
                self.supervisor.watch(self.poller, self._on_poll)
            return self.supervisor.run()
        finally:
            if listener is not None:
                listener.close()
            self._close()

    def _decide(self, result: JobResult) -> int:
        """The job's exit code, after the summary of every round."""
        code, text = summary(self.rounds, self.workers,
                             Ending(result, self.fatal, self.done, self.probes.lost,
                                    self.elastic.min_np),
                             self.router)
        console.write(text)
        return code

    def _choose_address(self, remote: Sequence[str], multi_host: bool) -> None:
        """The launcher's address every host reaches (rendezvous, wrappers' connections)."""
        layout = self.layout
        if not multi_host:
            if layout.subnet or layout.iface:
                self.address, self.iface = launcher_address(layout.subnet, layout.iface, None)
            return
        peer = None
        if remote:
            try:
                peer = resolve(remote[0], layout.ssh)
            except RemoteError as exc:
                raise TopologyError(str(exc)) from None
        self.address, self.iface = launcher_address(layout.subnet, layout.iface, peer)

    def _base_plan(self, port: int) -> LaunchPlan:
        options = self.options
        return LaunchPlan(
            program=tuple(options.argv), num_instances=0, num_replicas=0,
            ipus_per_replica=options.ipus_per_replica, instances=(),
            rendezvous_address=self.address, rendezvous_port=port,
            exported_env=tuple(options.exported_env), start_timeout=options.start_timeout,
            grace_period=options.grace_period, job_id=self.job_id,
            rendezvous_secret=self.secret, tf_config_mode="none", placement=options.placement)

    def _driver_settings(self, initial: Sequence[Tuple[str, int]]) -> HelperSettings:
        """The driver's settings: horovodrun's elastic options, and the addresses whose
        connections to the rendezvous it accepts."""
        elastic = self.elastic
        allowed = {LOOPBACK, self.address}
        for name, _ in initial:
            if not hostlib.is_local(name):
                try:
                    allowed.add(resolve(name, self.layout.ssh))
                except RemoteError:
                    pass  # its probe names the problem
        return HelperSettings(
            np=self.options.num_instances, min_np=elastic.min_np, max_np=elastic.max_np,
            elastic_timeout=elastic.elastic_timeout, reset_limit=elastic.reset_limit,
            failure_limit=elastic.host_failure_limit, allowed=sorted(allowed),
            cooldown_range=tuple(elastic.cooldown_range) if elastic.cooldown_range else None,
            start_timeout=self.options.start_timeout)

    def _close(self) -> None:
        self._close_driver_socket()
        if self.driver is not None:
            self.driver.close()
        if self.poller is not None:
            self.poller.close()
        if self.probes is not None:
            self.probes.close()
        if self.router is not None:
            self.router.close_all()
        for logs in self.logs.values():
            logs.close()

    def _close_driver_socket(self) -> None:
        if self.driver is not None and self.driver.sock is not None:
            self.supervisor.unwatch(self.driver)
            self.driver.close_socket()

    # ---- the driver ---------------------------------------------------------------------------
    def _send(self, frame: frames.Frame) -> None:
        if self.driver is not None and not self.driver.send(frame):
            self._give_up("the elastic driver (helper process) stopped reading the launcher's "
                          "messages")

    def deadline(self) -> Optional[float]:
        """The driver helper's heartbeat is due by then (while its socket is open)."""
        if self.driver is None or self.driver.sock is None:
            return None
        return self.heard + DRIVER_SILENT_S

    def expired(self, now: float) -> None:
        """No message from the driver helper for DRIVER_SILENT_S: it is stopped or stuck."""
        if self.done is None and self.fatal is None:
            self._close_driver_socket()
            self._give_up(f"the elastic driver (helper process, pid {self.driver.helper.pid}) "
                          f"sent nothing for {DRIVER_SILENT_S:g} s (its heartbeat comes every "
                          f"{HEARTBEAT_S:g} s): it is stopped or stuck.")

    def _progressed(self, inst: Instance, step: int) -> None:
        self.mark += 1

    def _on_driver(self) -> None:
        self.heard = time.monotonic()
        received = self.driver.read()
        if received is None:
            self._close_driver_socket()
            if self.done is None and self.fatal is None:
                code = self.driver.exit_status()
                self._give_up("the elastic driver (helper process) ended without a result"
                              + (f" ({processes.describe_exit(code)})" if code is not None else ""))
            return
        for frame in received:
            self._on_frame(frame)

    def _on_frame(self, frame: dict) -> None:
        kind = frame["kind"]
        if kind == frames.Round.KIND:
            self._on_round(frame)
        elif kind == frames.Start.KIND:
            self._on_start(frame)
        elif kind == frames.Stop.KIND:
            worker = self.workers.get(int(frame["wid"]))
            if worker is not None:
                self.world.stop_instance(worker.inst)
        elif kind == frames.Blacklist.KIND:
            cooldown = frame.get("cooldown")
            how_long = "for the rest of the job" if cooldown is None else \
                f"for {float(cooldown):.1f} s (--blacklist-cooldown-range)"
            if frame.get("forever"):
                how_long += (f" (it failed --host-failure-limit {frame['limit']} times in a "
                             f"row without progress)")
            self._event(f"{frame['host']} blacklisted {how_long}")
        elif kind == frames.Retry.KIND:
            self._event(f"{frame['sentence']}: instance {frame['wid']}'s slot is started again "
                        f"(the other hosts cannot carry --min-np {self.elastic.min_np})")
        elif kind == frames.Fatal.KIND:
            self.fatal = str(frame["reason"])
            self.supervisor.request_stop(f"the elastic job cannot go on: {self.fatal}")
        elif kind == frames.Alive.KIND:
            pass  # the heartbeat: self.heard is set on every read
        elif kind == frames.Done.KIND:
            self.done = frame
            self._close_driver_socket()
            self.world.close()

    def _give_up(self, why: str) -> None:
        self.fatal = why
        self.supervisor.request_stop(why)

    def _on_round(self, frame: dict) -> None:
        self.supervisor.hang.restart(time.monotonic())  # its workers may be starting
        new = Round(int(frame["round"]), int(frame["size"]), frame["hosts"])
        previous = self.rounds[-1] if self.rounds else None
        self.rounds.append(new)
        change = "" if previous is None else \
            f" (was {previous.size} on {previous.layout})"
        self.log.record(f"round {new.number}: {new.size} instance(s) on {new.layout}{change}")

    def _on_start(self, frame: dict) -> None:
        wid, name = int(frame["wid"]), str(frame["hostname"])
        host = self.probes.usable(name)
        round_number = int(frame["round"])
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
        # the index add_instance gives it (its end may be reported before add_instance returns)
        self.by_index[len(self.supervisor.instances)] = worker
        worker.inst = self.world.add_instance(host, self._worker_env(frame, host), str(wid), logs)

    def _worker_env(self, start: dict, host: Host) -> Dict[str, str]:
        """The worker's variables on top of what it inherits: Horovod's slot and elastic
        rendezvous (as horovodrun sets them), PopDist's from its rank, and -x."""
        options, per = self.options, self.replicas_per_instance
        rank, size = int(start["rank"]), int(start["size"])
        local_rank, local_size = int(start["local_rank"]), int(start["local_size"])
        plan = self.supervisor.plan
        env = {
            c.NUM_TOTAL_REPLICAS: str(size * per), c.NUM_LOCAL_REPLICAS: str(per),
            c.REPLICA_INDEX_OFFSET: str(rank * per),
            c.NUM_IPUS_PER_REPLICA: str(options.ipus_per_replica),
            c.LOCAL_INSTANCE_INDEX: str(local_rank), c.UNIFORM_REPLICAS: "1",
            c.NUM_INSTANCES: str(size), c.INSTANCE_INDEX: str(rank),
            # resets before the worker's round (Horovod counts rounds from 1): 0 at the start,
            # as in a fixed job's first attempt
            c.RESTART_COUNT: str(int(start["round"]) - 1), c.JOB_ID: self.job_id,
            "HOROVOD_HOSTNAME": str(start["hostname"]), "HOROVOD_RANK": str(rank),
            "HOROVOD_SIZE": str(size), "HOROVOD_LOCAL_RANK": str(local_rank),
            "HOROVOD_LOCAL_SIZE": str(local_size),
            "HOROVOD_CROSS_RANK": str(start["cross_rank"]),
            "HOROVOD_CROSS_SIZE": str(start["cross_size"]),
            "HOROVOD_ELASTIC": "1", "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous.client_address(
                plan.rendezvous_address, plan.rendezvous_port, self.secret),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(plan.rendezvous_port),
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_S),
        }
        if host.iface:
            env["HOROVOD_GLOO_IFACE"] = host.iface
        if "TF_CONFIG" not in dict(options.exported_env):
            env[UNSET_ENV] = "TF_CONFIG"  # no fixed cluster in an elastic job
        if options.placement:
            env[placing.PLACEMENT_ENV] = placing.for_instance(options.placement, rank,
                                                              local_rank, local_size, per)
        env.update(options.exported_env)
        return env

    # ---- workers' ends ------------------------------------------------------------------------
    def _ended(self, inst: Instance, how: str, detail: str) -> None:
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
                self._event(f"{where} {worker.describe()} after its host left the job")
            return
        if how == "lost":
            if self.probes.lose(worker.hostname, detail):
                self._event(f"{worker.hostname} lost: {where} {detail}")
                self.probes.refresh()
            else:
                self._event(f"{where} {detail}")
        elif how == "start-failed":
            self._event(f"{where} could not start: {detail}")
        else:
            self._event(f"{where} {worker.describe()}")

    def _cut_survivors(self, failed: Worker) -> None:
        """A worker of the current round failed: every running worker's wrapper shuts down its
        program's connections to the job's workers, so a collective blocked on a peer fails now
        rather than after the Gloo timeout (peer_sockets.py). Once a round: the survivors are
        unblocked by the first cut, and a later one could reach them while they connect to the
        next round's peers (Gloo aborts the process on a connection closed during its set-up);
        never for a worker whose host the current round no longer has (it ended after the next
        round formed without it)."""
        current = self.rounds[-1] if self.rounds else None
        if not self.cut_peers or current is None or self.cut_round == current.number or \
                failed.hostname not in dict(current.hosts):
            return
        self.cut_round = current.number
        plan = self.supervisor.plan
        payload = peer_sockets.notice((plan.rendezvous_address, plan.rendezvous_port),
                                      [h.address for h in self.probes.hosts.values()])
        for other in self.workers.values():
            if other.inst is not None and other.ended_round is None:
                self.world.send_to(other.inst, CUT_PEERS, payload)

    def _blame(self, worker: Worker) -> str:
        """Who the driver should blame: "none" (stopped, or a success), "host" (lost, or could
        not start there: the host itself failed), "slot" (the program failed or hung on a live
        host). What follows is the failure policy's (``failure_policy.py``), in the driver helper."""
        if worker.inst.stopped or worker.code == 0:
            return "none"
        if worker.how != "exited":
            return "host"
        if worker.hostname not in dict(self.probes.pushed or ()):  # removed (drained): Horovod
            return "none"  # ends its workers on purpose
        return "slot"

    def _stopping(self) -> None:
        """The job is stopping (a signal, --timeout, FATAL): no replacement may start."""
        self._close_driver_socket()

    def _event(self, text: str) -> None:
        self.log.record(text)
        if self.rounds:
            self.rounds[-1].events.append(f"{time.strftime('%H:%M:%S')} {text}")

    # ---- hosts --------------------------------------------------------------------------------
    def _on_poll(self) -> None:
        for answer in self.poller.read():
            change = self.membership.on_answer(answer)
            if change.warning:
                self.log.record(f"warning: {change.warning}")
            for name in change.added:
                self._event(f"{name} added by the discovery script")
            for name in change.removed:
                self._event(f"{name} removed by the discovery script")
        self.probes.refresh()


def _layout(hosts: Sequence[Tuple[str, int]]) -> str:
    return ", ".join(f"{h}:{n}" for h, n in hosts) or "none"
