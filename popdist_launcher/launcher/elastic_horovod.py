"""Horovod elastic jobs: Horovod's ElasticDriver runs in a helper process
(``spawned/elastic_driver.py``) and asks for workers; the launcher starts each one through the
backend and its wrapper (an open-world Supervisor), tells the driver how each ended, and keeps
the hosts the driver sees current (discovery script, host probes, lost hosts).

Every membership change is one line on the console and in ``--output-dir/membership.log``;
worker ``w`` is tagged ``[w]`` and logged in ``attempt-<round>/instance-<w>.std{out,err}.log``
(the registration round it started in); the final summary lists every round.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from popdist_launcher import _contract as c
from popdist_launcher.launcher import hosts as hostlib
from popdist_launcher.launcher import ports, processes
from popdist_launcher.launcher.membership import Blacklist, Membership, MembershipLog, Poller
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output import STDERR, STDOUT, LogFiles, Router, open_output_dir
from popdist_launcher.launcher.plan import Host, LaunchPlan
from popdist_launcher.launcher.remote import BackgroundProbe, RemoteError, probe_command, resolve
from popdist_launcher.launcher.spawned import placement as placing
from popdist_launcher.launcher.spawned import peer_sockets, rendezvous
from popdist_launcher.launcher.spawned.protocol import CUT_PEERS, UNSET_ENV
from popdist_launcher.launcher.attempt import Instance, JobState
from popdist_launcher.launcher.supervisor import Supervisor
from popdist_launcher.launcher.world import OpenWorld
from popdist_launcher.launcher.topology import LOOPBACK, TopologyError, _local_choice

HELPER_MODULE = "popdist_launcher.launcher.spawned.elastic_driver"
GLOO_TIMEOUT_S = 30   # HOROVOD_GLOO_TIMEOUT_SECONDS unless -x sets it: how long survivors wait
#                       in a collective for a peer that stopped answering
LOST_CODE = 255       # the exit code the driver records for a lost worker (as ssh's)
NOT_RUN_CODE = 1      # ... for one that never ran
DISCOVERY_INTERVAL_S = 1.0  # horovodrun's
PROBE_RETRY_S = 2.0   # a host whose probe failed is probed again at the first poll after this
DISCOVERY_TIMEOUT_S = 10.0
HELPER_EXIT_S = 2.0   # after its socket closed, before the helper's group is killed
P = "poprun-lite: "


def run(options: JobOptions, say: Callable[[str], None]) -> int:
    """Run a Horovod elastic job to its end; the exit code is the job's. Raises TopologyError
    and PortError (one sentence) when the launcher's address cannot be chosen or bound."""
    return ElasticHorovodJob(options, say).run()


class Worker:
    """One worker the driver asked for (a START), and how it ended."""

    def __init__(self, start: dict) -> None:
        self.wid = int(start["wid"])
        self.round = int(start["round"])
        self.hostname = str(start["hostname"])
        self.rank = int(start["rank"])
        self.size = int(start["size"])
        self.local_rank = int(start["local_rank"])
        self.inst: Optional[Instance] = None  # set once the supervisor has it
        self.ended_round: Optional[int] = None
        self.how = ""  # "exited", "lost", "start-failed", "not-started"
        self.code: Optional[int] = None
        self.blame = ""
        self.detail = ""

    @property
    def failed(self) -> bool:
        """It ended by itself, and not well (a STOP, or the job's end, is no failure)."""
        return self.ended_round is not None and not self.inst.stopped and self.code != 0

    def describe(self) -> str:
        if self.how == "exited":
            return processes.describe_exit(self.inst.returncode)
        return self.detail or self.how


class Round:
    def __init__(self, number: int, size: int, hosts: Sequence[Sequence]) -> None:
        self.number = number
        self.size = size
        self.hosts = [(str(h), int(n)) for h, n in hosts]
        self.started = time.time()
        self.events: List[str] = []  # what happened during it, for the summary

    @property
    def layout(self) -> str:
        return ", ".join(f"{h}:{n}" for h, n in self.hosts)


class ElasticHorovodJob:
    """One Horovod elastic job: the helper, the open-world Supervisor, the hosts."""

    def __init__(self, options: JobOptions, say: Callable[[str], None]) -> None:
        self.options = options
        self.elastic = options.elastic
        self.layout = options.layout
        self.say = say
        self.job_id = os.urandom(6).hex()
        self.secret = rendezvous.new_secret()  # one for the whole job: survivors keep theirs
        replicas = options.num_replicas or options.num_instances
        self.replicas_per_instance = max(1, replicas // options.num_instances)
        self.hosts: Dict[str, Host] = {}  # probed hosts: where workers can be started
        self.lost: Dict[str, str] = {}  # hosts lost (why), until a probe answers again
        self.probes: Dict[str, BackgroundProbe] = {}
        self.retry_at: Dict[str, float] = {}  # hosts whose probe failed: not before then
        self.pushed: Optional[List[Tuple[str, int]]] = None
        self.workers: Dict[int, Worker] = {}
        self.by_index: Dict[int, Worker] = {}
        self.rounds: List[Round] = []
        self.logs: Dict[int, LogFiles] = {}
        self.fatal: Optional[str] = None
        self.done: Optional[dict] = None
        self.helper: Optional[subprocess.Popen] = None
        self.control: Optional[socket.socket] = None
        self.incoming = b""
        self.root_fd: Optional[int] = None
        self.supervisor: Optional[Supervisor] = None
        self.router: Optional[Router] = None
        self.log: Optional[MembershipLog] = None
        self.poller: Optional[Poller] = None
        self.membership: Optional[Membership] = None
        self.address, self.iface = LOOPBACK, "lo"
        self.cut_peers = os.environ.get(peer_sockets.SWITCH_ENV, "1") != "0"

    # ---- the job ------------------------------------------------------------------------------
    def run(self) -> int:
        options, elastic = self.options, self.elastic
        initial = [(str(h), int(n)) for h, n in elastic.hosts]
        remote = [h for h, _ in initial if not hostlib.is_local(h)]
        # a discovery script may add other hosts later, unless the backend is local
        self.multi_host = bool(remote) or (elastic.discovery_script is not None and
                                           self.layout.backend.name != "local")
        self.initial_probes = set(remote)  # HOSTS waits for them: the first round sees them all
        self._choose_address(remote)
        listener = ports.listen_socket(self.address)
        try:
            if options.output.output_dir:
                self.root_fd = open_output_dir(options.output.output_dir)
            self.router = Router(0, options.output)
            self.log = MembershipLog(self.router.say, options.output.output_dir)
            plan = self._base_plan(listener.getsockname()[1])
            self.supervisor = Supervisor(plan, self.layout.backend, self.router,
                                         timeout=options.timeout,
                                         world=OpenWorld(self._ended, self._stopping,
                                                         remote=self.multi_host))
            self._start_helper(listener, initial)
            listener.close()
            listener = None
            if elastic.discovery_script:
                self.poller = Poller(elastic.discovery_script, elastic.slots_per_host,
                                     interval=DISCOVERY_INTERVAL_S,
                                     timeout=min(DISCOVERY_TIMEOUT_S, options.start_timeout))
            self.membership = Membership(initial, Blacklist(None), self.poller)
            self.log.record(f"elastic job (Horovod's driver, backend {self.layout.backend.name}): "
                            f"hosts {_layout(initial)}; "
                            f"-np {options.num_instances}, --min-np {elastic.min_np}, --max-np "
                            f"{elastic.max_np if elastic.max_np is not None else 'every slot'}")
            self._refresh_hosts()
            if self.poller is not None:
                self.poller.start()
                self.supervisor.watch(self.poller, self._on_poll)
            result = self.supervisor.run()
        finally:
            if listener is not None:
                listener.close()
            self._close()
        return self._end(result)

    def _choose_address(self, remote: Sequence[str]) -> None:
        """The launcher's address every host reaches (rendezvous, wrappers' connections)."""
        layout = self.layout
        if not self.multi_host:
            if layout.subnet or layout.iface:
                self.address, self.iface = _local_choice(layout.subnet, layout.iface, None)
            return
        peer = None
        if remote:
            try:
                peer = resolve(remote[0], layout.ssh)
            except RemoteError as exc:
                raise TopologyError(str(exc)) from None
        self.address, self.iface = _local_choice(layout.subnet, layout.iface, peer)

    def _base_plan(self, port: int) -> LaunchPlan:
        options = self.options
        return LaunchPlan(
            program=tuple(options.argv), num_instances=0, num_replicas=0,
            ipus_per_replica=options.ipus_per_replica, instances=(),
            rendezvous_address=self.address, rendezvous_port=port,
            exported_env=tuple(options.exported_env), start_timeout=options.start_timeout,
            grace_period=options.grace_period, job_id=self.job_id,
            rendezvous_secret=self.secret, tf_config_mode="none", placement=options.placement)

    def _start_helper(self, listener: socket.socket, initial: Sequence[Tuple[str, int]]) -> None:
        elastic = self.elastic
        ours, theirs = socket.socketpair()
        allowed = {LOOPBACK, self.address}
        for name, _ in initial:
            if not hostlib.is_local(name):
                try:
                    allowed.add(resolve(name, self.layout.ssh))
                except RemoteError:
                    pass  # its probe names the problem
        settings = {"np": self.options.num_instances, "min_np": elastic.min_np,
                    "max_np": elastic.max_np, "elastic_timeout": elastic.elastic_timeout,
                    "reset_limit": elastic.reset_limit,
                    "failure_limit": elastic.host_failure_limit,
                    "cooldown_range": list(elastic.cooldown_range)
                    if elastic.cooldown_range else None, "allowed": sorted(allowed)}
        self.helper = subprocess.Popen(
            [sys.executable, "-m", HELPER_MODULE, str(theirs.fileno()), str(listener.fileno()),
             json.dumps(settings, separators=(",", ":"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(), listener.fileno()), process_group=0, close_fds=True,
            env={**os.environ, rendezvous.SECRET_ENV: self.secret})
        theirs.close()
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.control = ours
        self.supervisor.watch(ours, self._on_helper)

    def _close(self) -> None:
        self._close_control()
        if self.helper is not None:
            try:
                self.helper.wait(timeout=HELPER_EXIT_S)
            except subprocess.TimeoutExpired:
                processes.signal_group(self.helper.pid, signal.SIGKILL)
                self.helper.wait()
        if self.poller is not None:
            self.poller.close()
        for probe in self.probes.values():
            probe.kill()
        self.probes.clear()
        if self.router is not None:
            self.router.close_all()
        for logs in self.logs.values():
            logs.close()
        if self.root_fd is not None:
            os.close(self.root_fd)

    def _close_control(self) -> None:
        if self.control is not None:
            self.supervisor.unwatch(self.control)
            self.control.close()
            self.control = None

    # ---- the helper ---------------------------------------------------------------------------
    def _send(self, kind: str, **fields) -> None:
        if self.control is None:
            return
        data = (json.dumps({"kind": kind, **fields}) + "\n").encode()
        try:
            sent = self.control.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # it ended: its end of file is read next
        if sent < len(data):  # a megabyte unread: the helper is stuck
            self._give_up("the elastic driver (helper process) stopped reading the launcher's "
                          "messages")

    def _on_helper(self) -> None:
        try:
            data = self.control.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_control()
            if self.done is None and self.fatal is None:
                code = self.helper.poll()
                self._give_up("the elastic driver (helper process) ended without a result"
                              + (f" ({processes.describe_exit(code)})" if code is not None else ""))
            return
        *lines, self.incoming = (self.incoming + data).split(b"\n")
        for line in lines:
            try:
                frame = json.loads(line) if line.strip() else None
            except ValueError:
                frame = {"kind": "FATAL", "reason": f"the elastic driver sent {line[:80]!r}, "
                                                    f"which is no message"}
            if frame is not None:
                self._on_frame(frame)

    def _on_frame(self, frame: dict) -> None:
        kind = frame["kind"]
        if kind == "ROUND":
            self._on_round(frame)
        elif kind == "START":
            self._on_start(frame)
        elif kind == "STOP":
            worker = self.workers.get(int(frame["wid"]))
            if worker is not None:
                self.supervisor.stop_instance(worker.inst)
        elif kind == "BLACKLIST":
            cooldown = frame.get("cooldown")
            how_long = "for the rest of the job" if cooldown is None else \
                f"for {float(cooldown):.1f} s (--blacklist-cooldown-range)"
            self._event(f"{frame['host']} blacklisted {how_long}")
        elif kind == "RETRY":
            self._event(f"{frame['host']} is the job's only host left: instance {frame['wid']}'s "
                        f"slot is started again (failure {frame['streak']} in a row without "
                        f"progress; --host-failure-limit {frame['limit']})")
        elif kind == "FATAL":
            self.fatal = str(frame["reason"])
            self.supervisor.request_stop(f"the elastic job cannot go on: {self.fatal}")
        elif kind == "DONE":
            self.done = frame
            self._close_control()
            self.supervisor.close_world()

    def _give_up(self, why: str) -> None:
        self.fatal = why
        self.supervisor.request_stop(why)

    def _on_round(self, frame: dict) -> None:
        new = Round(int(frame["round"]), int(frame["size"]), frame["hosts"])
        previous = self.rounds[-1] if self.rounds else None
        self.rounds.append(new)
        change = "" if previous is None else \
            f" (was {previous.size} on {previous.layout})"
        self.log.record(f"round {new.number}: {new.size} instance(s) on {new.layout}{change}")

    def _on_start(self, frame: dict) -> None:
        wid, name = int(frame["wid"]), str(frame["hostname"])
        host = self.hosts.get(name)
        round_number = int(frame["round"])
        if host is None or name in self.lost:  # lost since the driver last saw HOSTS
            self._send("EXITED", wid=wid, code=NOT_RUN_CODE, how="start-failed", blame="host")
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
        worker.inst = self.supervisor.add_instance(host, self._worker_env(frame, host), str(wid),
                                                   logs)

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
        if worker.blame != "none" and how in ("exited", "lost") and self.cut_peers:
            self._cut_survivors()  # before the driver can start a round without it
        self._send("EXITED", wid=worker.wid, code=worker.code, how=how, blame=worker.blame,
                   what=worker.describe())
        where = f"instance {worker.wid} (rank {worker.rank} of {worker.size}) on " \
                f"{worker.hostname}"
        if worker.blame == "none":
            if how == "exited" and worker.code != 0 and not inst.stopped:
                self._event(f"{where} {worker.describe()} after its host left the job")
            return
        if how == "lost":
            first = worker.hostname not in self.lost
            self.lost[worker.hostname] = detail
            if first:
                self._event(f"{worker.hostname} lost: {where} {detail}")
                self._refresh_hosts()
            else:
                self._event(f"{where} {detail}")
        elif how == "start-failed":
            self._event(f"{where} could not start: {detail}")
        else:
            self._event(f"{where} {worker.describe()}"
                        + ("; every instance of the host failed" if worker.blame == "host"
                           else ""))

    def _cut_survivors(self) -> None:
        """A worker failed: every running worker's wrapper shuts down its program's connections
        to the job's workers, so a collective blocked on a peer fails now rather than after
        the Gloo timeout (peer_sockets.py)."""
        plan = self.supervisor.plan
        payload = peer_sockets.notice((plan.rendezvous_address, plan.rendezvous_port),
                                      [h.address for h in self.hosts.values()])
        for other in self.workers.values():
            if other.inst is not None and other.ended_round is None:
                self.supervisor.send_to(other.inst, CUT_PEERS, payload)

    def _blame(self, worker: Worker) -> str:
        """Who the driver should blame: "none" (stopped, or a success), "host" (lost, could not
        start there, or every instance of the host in this round failed: it is blacklisted),
        "slot" (the program failed on a live host: the driver blacklists the host when the other
        hosts carry --min-np, else starts the slot again, up to --host-failure-limit)."""
        if worker.inst.stopped or worker.code == 0:
            return "none"
        if worker.how != "exited":
            return "host"
        if worker.hostname not in dict(self.pushed or ()):  # removed (drained): Horovod ends
            return "none"  # its workers on purpose
        current = worker.ended_round
        peers = [w for w in self.workers.values() if w.hostname == worker.hostname
                 and (w.ended_round is None or w.ended_round == current)]
        return "host" if all(w.failed for w in peers) else "slot"

    def _stopping(self) -> None:
        """The job is stopping (a signal, --timeout, FATAL): no replacement may start."""
        self._close_control()

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
        self._refresh_hosts()

    def _refresh_hosts(self) -> None:
        """Probe the listed hosts not yet known (or lost), and push the usable ones."""
        listed = self.membership.usable()
        now = time.monotonic()
        for name, _ in listed:
            if (name not in self.hosts or name in self.lost) and name not in self.probes and \
                    now >= self.retry_at.get(name, 0.0):
                self._probe(name)
        usable = [(n, s) for n, s in listed if n in self.hosts and n not in self.lost]
        if usable != self.pushed and not self.initial_probes:
            self.pushed = usable
            self._send("HOSTS", hosts=[[n, s] for n, s in usable])

    def _probe(self, name: str) -> None:
        if hostlib.is_local(name):
            self.hosts[name] = Host(name, self.address, self.iface, local=True)
            self.lost.pop(name, None)
            return
        layout = self.layout
        try:
            argv = probe_command(name, 0, layout.ssh, layout.subnet, layout.iface)
        except RemoteError as exc:
            self._event(f"{name} cannot be used: {exc}")
            return
        probe = self.probes[name] = BackgroundProbe(name, argv)
        self.supervisor.watch(probe, lambda: self._on_probe(probe))

    def _on_probe(self, probe: BackgroundProbe) -> None:
        if not probe.read():
            return
        self.supervisor.unwatch(probe)
        del self.probes[probe.name]
        reply, why = probe.result()
        name = probe.name
        self.initial_probes.discard(name)
        if reply is None:
            self.retry_at[name] = time.monotonic() + PROBE_RETRY_S
            if name not in self.lost:
                self.lost[name] = f"its probe failed: {why}"
                self._event(f"{name} cannot be used yet: {why}")
            self._refresh_hosts()
            return
        came_back = name in self.lost
        self.lost.pop(name, None)
        self.hosts[name] = Host(name, reply.address, reply.iface, local=False)
        self._send("ALLOW", addresses=[reply.address])
        self._event(f"{name} {'answers again' if came_back else 'answers'} "
                    f"({reply.address}, {reply.iface or 'interface unknown'})")
        self._refresh_hosts()

    # ---- the end ------------------------------------------------------------------------------
    def _end(self, result) -> int:
        """The job's exit code, after the summary of every round."""
        say = self.say
        lines = ["", P + f"===== elastic job: {len(self.rounds)} round(s) ====="]
        for r in self.rounds:
            started = [str(w.wid) for w in self.workers.values() if w.round == r.number]
            when = time.strftime('%H:%M:%S', time.localtime(r.started))
            lines.append(P + f"round {r.number} ({when}): {r.size} instance(s) on {r.layout}; "
                         f"instances started: {', '.join(started) or 'none'}")
            lines.extend(P + f"    {event}" for event in r.events)
        if result.state in (JobState.INTERRUPTED, JobState.FAILED):
            lines.append(P + (f"job interrupted ({signal.Signals(result.signal_received).name})."
                              if result.state is JobState.INTERRUPTED else
                              "job failed: see the root cause above."))
            say("\n".join(lines))
            return result.exit_code
        code, verdict = self._verdict()
        lines.append(P + verdict)
        say("\n".join(lines))
        return code

    def _verdict(self) -> Tuple[int, str]:
        if self.fatal is not None:
            lost = "; ".join(f"{h} ({why})" for h, why in self.lost.items())
            failed = [w for w in self.workers.values() if w.blame in ("host", "slot")]
            causes = "; ".join(f"instance {w.wid} on {w.hostname} {w.describe()}"
                               for w in failed[-4:])
            return 1, f"job failed: {self.fatal}" + (f" Hosts lost: {lost}." if lost else "") + \
                (f" Last failures: {causes}." if causes else "")
        done = self.done or {}
        results = done.get("results") or {}
        failing = sorted(((stamp, name, code) for name, (code, stamp) in results.items()
                          if code != 0))
        if done.get("error"):
            last = [w for w in self.workers.values() if w.blame in ("host", "slot")]
            code = last[-1].code if last else 1
            text = f"job failed: {done['error']}"
            if last:
                text += self._tail(last[-1])
            return code or 1, text
        if failing:
            _, name, code = failing[0]
            worker = self._latest(name)
            text = f"job failed: {name} exited with {code}"
            if worker is not None:
                text += self._tail(worker)
            return code, text
        last_round = self.rounds[-1] if self.rounds else None
        return 0, (f"job succeeded: every worker of round {last_round.number} exited 0 "
                   f"({last_round.size} on {last_round.layout})." if last_round else
                   "job succeeded.")

    def _latest(self, slot_name: str) -> Optional[Worker]:
        """The last worker of a slot named as Horovod names it: ``host[local_rank]``."""
        found = [w for w in self.workers.values()
                 if f"{w.hostname}[{w.local_rank}]" == slot_name]
        return found[-1] if found else None

    def _tail(self, worker: Worker) -> str:
        lines = self.router.tail(worker.inst.index, STDERR) or \
            self.router.tail(worker.inst.index, STDOUT)
        if not lines:
            return f" (instance {worker.wid} on {worker.hostname} wrote nothing)."
        return f" (instance {worker.wid} on {worker.hostname}); its last line(s):\n" + \
            "\n".join(f"    {line}" for line in lines)


def _layout(hosts: Sequence[Tuple[str, int]]) -> str:
    return ", ".join(f"{h}:{n}" for h, n in hosts) or "none"
