"""Horovod's elastic driver (registration rounds, blacklist, elastic rendezvous) run as a library in
a helper process, with every worker started and watched by the launcher over a socketpair.

Usage (by the launcher only), with the rendezvous secret in $POPRUN_RENDEZVOUS_SECRET:
python -m popdist_launcher.launcher.elastic.helper.elastic_driver \
    CONTROL_FD RENDEZVOUS_FD SETTINGS_JSON

CONTROL_FD is the helper's end of a socketpair carrying frames (wire/helper_frames.py):
from the launcher HOSTS (usable hosts in rank order), ALLOW (more rendezvous client addresses) and
EXITED (one per START: exit code, blame, how in words, the job's progress mark); to the launcher
ROUND, START, STOP, BLACKLIST, RETRY, FATAL (one sentence, always followed by DONE), DONE, and
ALIVE every HEARTBEAT_S (the launcher ends the job when the helper falls silent).
SETTINGS_JSON: the job's HelperSettings (wire/helper_settings.py: horovodrun's elastic options,
the rendezvous client addresses, and how long the survivors of a reset wait for a new worker).
RENDEZVOUS_FD is a listening TCP socket the launcher bound: Horovod's elastic rendezvous handler
is served on it, behind the secret, for the whole job. The helper ignores SIGINT (the launcher
forwards signals to the workers it started), never installs Horovod's signal handlers, and
exits at once when CONTROL_FD reaches end of file.

What differs from horovodrun's driver: hosts come from the launcher (it runs the discovery
script and removes lost hosts), hosts take ranks in the order of HOSTS and the workers that go on
through a reset keep the lowest ranks (rank 0, the source of the state sync, holds the last
commit), what a failed worker means for its host is the failure policy's (``failure_policy.py``, the
same as restart mode's: blacklist, start the slot again in place with RETRY, or FATAL), a round
that cannot start ends with FATAL instead of a silent stop, the survivors of a reset are held
until the round's new workers reached Gloo's rendezvous (``JoinGate``: a new worker that ends
before then is a failure of its host, and the round forms again without it, so that the
survivors never enter a rendezvous that cannot complete), and every wait of ours and every
connection to a worker is bounded.

Here: the driver and ``main``; the socketpair's frames are ``launcher_link.py``'s, hosts and
blame ``driver_hosts.py``'s, the rendezvous server and its handler ``driver_rendezvous.py``'s,
the workers it asks the launcher for ``workers.py``'s, and every private name of Horovod's it
touches ``horovod_seams.py``'s.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

from horovod.runner.common.util.timeout import TimeoutException
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.worker import HostUpdateResult, WorkerNotificationClient

from popdist_launcher.launcher.elastic import failure_policy as policy
from popdist_launcher.launcher.elastic.helper.driver_hosts import (LauncherHostManager, PushedHosts,
                                                            Slot)
from popdist_launcher.launcher.elastic.helper import horovod_seams as seams
from popdist_launcher.launcher.elastic.helper import workers as workers_seam
from popdist_launcher.launcher.elastic.helper.driver_rendezvous import (AdoptedRendezvous,
                                                                        rendezvous_handler)
from popdist_launcher.launcher.elastic.helper.launcher_link import LauncherLink
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire.helper_settings import HelperSettings
from popdist_launcher.wire.rendezvous import MIN_SECRET_CHARS, SECRET_ENV

log = logging.getLogger(__name__)

LOG_LEVEL_ENV = "POPRUN_ELASTIC_DRIVER_LOG"  # e.g. INFO: Horovod's own driver log on stderr
CONNECT_TIMEOUT_S = 5.0  # every socket Horovod's notification client opens to a worker
PROBE_TIMEOUT_S = 3.0  # probing a worker's notification addresses (horovod: 20 s x 3 attempts)
POLL_S = workers_seam.POLL_S
HEARTBEAT_S = frames.Alive.HEARTBEAT_S  # ALIVE to the launcher
STOPPED_WAIT_S = 60.0  # a stopped new worker's end (the launcher's grace period, then SIGKILL)


class JoinGate:
    """The new workers of the round that runs, while its survivors are held in their
    rank_and_size request: which have reached Gloo's rendezvous (their first PUT under the
    global scope, ``key`` = their rank) and which have ended. Guarded by the driver's lock."""

    def __init__(self, joining: Dict[Slot, int], started: float) -> None:
        self.joining = joining  # slot -> rank in the round
        self.started = started  # monotonic time of the round's start
        self.arrived: Set[Slot] = set()
        self.ended: Set[Slot] = set()
        self.released = False  # the survivors went on into the round
        self.reforming = False  # one survivor's thread forms the round again

    def complete(self) -> bool:
        return not self.ended and self.arrived >= set(self.joining)

    def waiting(self) -> List[Slot]:
        return [slot for slot in self.joining if slot not in self.arrived | self.ended]

class BoundedNotificationClient(WorkerNotificationClient):
    """Horovod's client of a worker's notification service, probing its addresses once for at
    most PROBE_TIMEOUT_S (inside the worker's PUT) instead of 3 x 20 s."""

    def __init__(self, addresses, key) -> None:
        seams.init_notification_client(self, addresses, key, PROBE_TIMEOUT_S)


class LauncherElasticDriver(horovod_driver.ElasticDriver):
    """Horovod's ElasticDriver announcing each registration round to the launcher, naming why a
    round could not start, restarting failed slots of live hosts, and notifying the coordinator
    from its own thread (never while holding the hosts condition)."""

    def __init__(self, link: LauncherLink, rendezvous, discovery: PushedHosts, min_np: int,
                 max_np: Optional[int], elastic_timeout: float, reset_limit: Optional[int],
                 cooldown_range: Optional[Tuple[int, int]], failure_limit: int,
                 start_timeout: float = 120.0) -> None:
        self._link = link
        self._start_timeout = start_timeout
        self._gate_cond = threading.Condition()
        self._gate: Optional[JoinGate] = None
        self._workers: Optional[workers_seam.LauncherWorkers] = None
        self._absorbed = threading.local()  # a worker thread whose end the gate took
        self._fatal: Optional[str] = None
        self._ended_lock = threading.Lock()
        self._ended_slots: Set[Slot] = set()
        # The host change rank 0 must act on: (timestamp, update), until the next round.
        self._notice: Optional[Tuple[int, HostUpdateResult]] = None
        self._notice_time = 0
        self._notice_now = threading.Event()
        super().__init__(rendezvous, discovery, min_np, max_np, timeout=elastic_timeout,
                         reset_limit=reset_limit, cooldown_range=cooldown_range, verbose=0)
        seams.host_manager(self).link = link
        seams.host_manager(self).min_np = min_np
        seams.host_manager(self).streaks = policy.FailureStreaks(failure_limit)
        seams.host_manager(self).give_up = self._give_up
        threading.Thread(target=self._notify_forever, name="notifier", daemon=True).start()

    def use_workers(self, workers: workers_seam.LauncherWorkers) -> None:
        """The workers this driver starts (stopped or marked late when a round forms again)."""
        self._workers = workers

    def round(self) -> int:
        return seams.worker_registry(self).last_rendezvous()

    def slot_ended(self, slot: Slot) -> None:
        """The worker of ``slot`` ended: the next round starts that slot again if it is still
        assigned (Horovod only starts slots that are new in the assignment), and notices wait
        for the new worker's notification service."""
        with self._ended_lock:
            self._ended_slots.add(slot)
        with seams.hosts_lock(self):
            seams.worker_clients(self).pop(slot, None)

    def _activate_workers(self, min_num_proc: int) -> None:
        with seams.hosts_lock(self):
            self._notice = None  # this round takes the hosts as they are now
        current_hosts = self.wait_for_available_slots(min_num_proc)
        pending_slots = self._update_host_assignments(current_hosts)
        seams.worker_registry(self).reset(self.world_size())
        # Survivors of a reset (the workers not started now) wait for the new ones in
        # rank_and_size: see hold_survivors.
        joining = {(s.hostname, s.local_rank): s.rank for s in pending_slots}
        with self._gate_cond:
            self._gate = JoinGate(joining, time.monotonic()) \
                if joining and len(joining) < self.world_size() else None
            self._gate_cond.notify_all()
        self._link.send(frames.Round(
            round=self.round(), size=self.world_size(),
            hosts=[[host, len(slots)] for host, slots in self.host_assignments.items()]))
        seams.start_worker_processes(self, pending_slots)

    # ---- the survivors of a reset wait for the new workers ------------------------------------
    def arrived(self, key: str) -> None:
        """A PUT under Gloo's global scope: the worker of rank ``key`` is in Gloo's rendezvous
        (gloo writes its address under its rank, "N" or "rank_N")."""
        try:
            rank = int(key[len("rank_"):] if key.startswith("rank_") else key)
        except ValueError:
            return
        with self._gate_cond:
            gate = self._gate
            if gate is None or gate.released:
                return
            for slot, slot_rank in gate.joining.items():
                if slot_rank == rank and slot not in gate.ended:
                    gate.arrived.add(slot)
                    self._gate_cond.notify_all()

    def joining(self, slot: Slot) -> bool:
        """Whether ``slot``'s worker is a new one of a round whose survivors are held."""
        with self._gate_cond:
            gate = self._gate
            return gate is not None and not gate.released and slot in gate.joining

    def absorb_end(self, slot: Slot) -> bool:
        """The latest worker of ``slot`` ended (called from its thread): when it is a new
        worker of a round whose survivors are still held, the gate takes its end (Horovod's
        registry never sees it: the round forms again) and this returns True."""
        with self._gate_cond:
            gate = self._gate
            if gate is None or gate.released or slot not in gate.joining:
                return False
            gate.ended.add(slot)
            self._gate_cond.notify_all()
        self._absorbed.flag = True
        return True

    def _handle_worker_exit(self, slot_info, exit_code, timestamp) -> None:
        if getattr(self._absorbed, "flag", False):
            self._absorbed.flag = False
            return
        super()._handle_worker_exit(slot_info, exit_code, timestamp)

    def _holding(self) -> bool:
        with self._gate_cond:
            return self._gate is not None and not self._gate.released

    def hold_survivors(self) -> None:
        """Called in a survivor's rank_and_size request once its round has formed: return once
        every new worker of the round has reached Gloo's rendezvous. A new worker that ends
        first (its host's environment is broken: an ImportError, a crash before hvd.init) is a
        failure of its host for the failure policy; the round's other new workers are stopped
        (they wait in a rendezvous with ranks that are about to change) and the round forms
        again without what the policy took out. A new worker that has not arrived within
        --start-timeout is stopped and counts as failed. Without this, the survivors would
        wait for the missing rank in Gloo's rendezvous until HOROVOD_GLOO_TIMEOUT_SECONDS, and
        Horovod would abort them with the committed state they hold."""
        while True:
            with self._gate_cond:
                while True:
                    gate = self._gate
                    if gate is None or gate.released or self.finished():
                        return
                    if gate.complete():
                        gate.released = True
                        self._gate_cond.notify_all()
                        return
                    if not gate.reforming and (
                            gate.ended or time.monotonic() - gate.started > self._start_timeout):
                        gate.reforming = True
                        break
                    self._gate_cond.wait(POLL_S)
            try:
                self._form_again(gate)
            finally:
                with self._gate_cond:
                    gate.reforming = False
                    self._gate_cond.notify_all()

    def _form_again(self, gate: JoinGate) -> None:
        """Stop the held round's new workers that are still running, wait for their ends, let
        the failure policy judge the hosts of those that failed, and form the round again."""
        late = []
        with self._gate_cond:
            failed = set(gate.ended)
            if not failed:  # --start-timeout: the new workers still on their way failed
                late = gate.waiting()
        for slot in late:
            self._workers.mark_late(slot, self._start_timeout)
        for slot in gate.joining:
            if slot not in failed:
                self._workers.stop_slot(slot)
        deadline = time.monotonic() + STOPPED_WAIT_S
        with self._gate_cond:
            while len(gate.ended) < len(gate.joining) and not self.finished() and \
                    time.monotonic() < deadline:
                self._gate_cond.wait(POLL_S)
        for host in dict.fromkeys(host for host, _ in sorted(failed | set(late))):
            seams.host_manager(self).decide_for_failed_host(host)  # blacklist, RETRY or FATAL
        if self.finished():
            return
        try:
            self._activate_workers(seams.min_num_proc(self))
        except Exception as exc:
            if not self.finished():
                self._fatal = self._why_no_round(exc, seams.min_num_proc(self), "--min-np")
                self._link.send(frames.Fatal(reason=self._fatal))
                self.stop(self._fatal)

    def _get_host_assignments(self, current_hosts):
        """Horovod's assignment with the ranks renumbered: the workers that go on keep their
        order and take the lowest ranks, new and restarted workers follow in Horovod's order.
        Rank 0 is the source of every state sync, so it must hold the last commit (Horovod
        alone gives rank 0 to a worker restarted in place on the first host)."""
        by_host, ordered = super()._get_host_assignments(current_hosts)
        kept = {(host, s.local_rank): s.rank
                for host, slots in seams.host_assignments(self).items() for s in slots}

        def key(slot_info):
            previous = kept.get((slot_info.hostname, slot_info.local_rank))
            return (0, previous) if previous is not None else (1, slot_info.rank)

        ordered = sorted(ordered, key=key)
        for rank, slot_info in enumerate(ordered):
            slot_info.rank = rank  # the same objects as by_host's, listed by local rank
        return by_host, ordered

    def _update_host_assignments(self, current_hosts):
        with self._ended_lock:
            ended, self._ended_slots = self._ended_slots, set()
        # Keep every host (Horovod checks that one previous host is left), drop ended slots so
        # that they count as new.
        seams.set_host_assignments(self, {
            host: [s for s in slots if (host, s.local_rank) not in ended]
            for host, slots in seams.host_assignments(self).items()})
        return super()._update_host_assignments(current_hosts)

    def _give_up(self, reason: str) -> None:
        """End the job with ``reason`` (FATAL); no round starts after it."""
        self._fatal = reason
        self._link.send(frames.Fatal(reason=reason))
        self.stop(reason)

    def resume(self) -> None:
        if self.finished():  # given up while the registry handled the failure
            raise RuntimeError(self._fatal or "the job is ending")
        try:
            super().resume()
        except Exception as exc:
            if not self.finished():
                self._fatal = self._why_no_round(exc, seams.min_num_proc(self), "--min-np")
                self._link.send(frames.Fatal(reason=self._fatal))
            raise

    def stop(self, error_message: Optional[str] = None) -> None:
        super().stop(error_message or self._fatal)

    def start_failed(self, exc: Exception, num_proc: int) -> str:
        """The FATAL reason when the first round cannot start; sent once."""
        self._fatal = self._why_no_round(exc, num_proc, "-np")
        self._link.send(frames.Fatal(reason=self._fatal))
        return self._fatal

    def _why_no_round(self, exc: Exception, needed: int, option: str) -> str:
        with seams.hosts_lock(self):
            hosts = seams.host_manager(self).current_hosts
            usable = ", ".join(f"{h}:{hosts.get_slots(h)}" for h in hosts.host_assignment_order)
            manager = seams.host_manager(self)
            blacklisted = [h for h in hosts.host_slots if manager.is_blacklisted(h)]
        state = f"usable now: {usable or 'none'}" + (
            f"; blacklisted: {', '.join(blacklisted)}" if blacklisted else "")
        if isinstance(exc, TimeoutException):
            return (f"fewer than {option} {needed} slots were usable for --elastic-timeout "
                    f"{seams.elastic_timeout(self):g} s ({state}).")
        if "previous set" in str(exc):
            return (f"no host of round {self.round()} is usable any more, so no worker is left "
                    f"to pass the training state to new ones ({state}).")
        return f"the elastic driver could not start round {self.round() + 1}: {exc}"

    def register_worker_server(self, host, slot, addresses, secret_key) -> None:
        client = BoundedNotificationClient(addresses, secret_key)  # probes: not under the lock
        with seams.hosts_lock(self):
            seams.worker_clients(self)[(host, slot)] = client
        self._notice_now.set()

    def _notify_workers_host_changes(self, current_hosts, update_res) -> None:
        # Called by Horovod's discovery thread with the hosts condition held: decide here (as
        # Horovod does), connect from the notifier thread.
        next_host_assignments = {}
        if current_hosts.count_available_slots() >= seams.min_num_proc(self):
            next_host_assignments, _ = self._get_host_assignments(current_hosts)
        if next_host_assignments == self.host_assignments:
            return
        # Always "added": a removal-only update lets workers skip the state sync, which
        # deadlocks when the world grows again (horovod#3494); this costs one broadcast.
        update_res |= HostUpdateResult.added
        # Strictly increasing timestamps: Horovod's whole seconds would make a second change
        # within one second look old to the workers.
        self._notice_time = max(seams.epoch_time_s(), self._notice_time + 1)
        self._notice = (self._notice_time, update_res | (self._notice[1] if self._notice else 0))
        self._notice_now.set()

    def _notify_forever(self) -> None:
        """Send the standing notice to rank 0 at once and then every second until a round
        begins: rank 0 may not have registered yet, or may drop a notice that comes between
        its registration and its listener's (workers ignore a timestamp they acted on)."""
        while True:
            self._notice_now.wait(horovod_driver.DISCOVER_HOSTS_FREQUENCY_SECS)
            self._notice_now.clear()
            with seams.hosts_lock(self):
                coordinator = self.get_coordinator_info()
                client = coordinator and self.get_worker_client(coordinator)
                notice = self._notice
            if not (client and notice) or self._holding():
                continue  # while held, the round may form again: rank 0 hears after
            try:
                client.notify_hosts_updated(*notice)
            except Exception as exc:  # rank 0 died or is unreachable: its peers reset
                log.info("could not notify rank 0 of a host change: %s", exc)


def _configure_logging() -> None:
    """Our warnings on stderr; Horovod's own log only when $POPRUN_ELASTIC_DRIVER_LOG asks."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(
        "poprun-lite elastic driver: %(asctime)s %(threadName)s %(message)s"))
    level = logging.getLevelName(os.environ.get(LOG_LEVEL_ENV, "").upper())
    root = logging.getLogger()
    root.addHandler(handler)
    if isinstance(level, int):
        root.setLevel(level)
    else:
        root.setLevel(logging.CRITICAL)
        logging.getLogger("popdist_launcher").setLevel(logging.WARNING)  # ours, not Horovod's


def _end(link: LauncherLink, error: Optional[str], results: dict) -> None:
    link.send(frames.Done(error=error, results=results))
    logging.shutdown()
    os._exit(0 if error is None else 1)


def _heartbeat(link: LauncherLink) -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        link.send(frames.Alive())


def main(argv: Sequence[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher forwards signals to the workers
    socket.setdefaulttimeout(CONNECT_TIMEOUT_S)  # Horovod's notification client has no timeout
    _configure_logging()
    control = socket.socket(fileno=int(argv[0]))
    control.settimeout(None)
    link = LauncherLink(control)

    def fatal(reason: str) -> None:
        link.send(frames.Fatal(reason=reason))
        _end(link, reason, {})

    problem = seams.version_problem()
    if problem:
        fatal(problem)
    secret = os.environ.get(SECRET_ENV, "")
    if len(secret) < MIN_SECRET_CHARS:
        fatal(f"the elastic driver needs the job's rendezvous secret in ${SECRET_ENV} (at least "
              f"{MIN_SECRET_CHARS} characters); the launcher sets it.")
    try:
        settings = HelperSettings.decode(argv[2])
        if settings.cooldown_range:
            seams.validate_cooldown_range(settings.cooldown_range)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        fatal(f"the elastic driver's settings are not valid ({' '.join(str(exc).split())}).")

    discovery = PushedHosts()
    allowed = set(settings.allowed)
    workers = workers_seam.LauncherWorkers(link)

    def handle(frame: frames.Frame) -> None:
        if isinstance(frame, frames.Hosts):
            discovery.push(frame.hosts)
        elif isinstance(frame, frames.Allow):
            allowed.update(str(a) for a in frame.addresses)
        elif isinstance(frame, frames.Exited):
            workers.exited(int(frame.wid), int(frame.code), str(frame.blame),
                           str(frame.what or f"exited with {frame.code}"), int(frame.mark))
        else:
            log.error("ignored a %s frame from the launcher, which only the helper sends",
                      frame.KIND)

    threading.Thread(target=link.read_forever, args=(handle,), name="launcher",
                     daemon=True).start()
    threading.Thread(target=_heartbeat, args=(link,), name="heartbeat", daemon=True).start()
    # Built once the hosts are known: Horovod's discovery thread polls at once, then every 1 s.
    if not discovery.received.wait(settings.elastic_timeout):
        fatal(f"the launcher sent no hosts within --elastic-timeout "
              f"{settings.elastic_timeout:g} s.")
    seams.use_host_manager(LauncherHostManager)
    rendezvous = AdoptedRendezvous(int(argv[1]), allowed, secret)
    driver = LauncherElasticDriver(link, rendezvous, discovery, settings.min_np,
                                   settings.max_np, settings.elastic_timeout,
                                   settings.reset_limit, settings.cooldown_range,
                                   settings.failure_limit, settings.start_timeout)
    workers.bind(driver)
    driver.use_workers(workers)
    rendezvous.start(rendezvous_handler(driver))  # requests so far wait in the backlog
    try:
        driver.start(settings.np, workers.create_worker)
    except Exception as exc:
        reason = driver.start_failed(exc, settings.np)
        driver.stop()
        _end(link, reason, {})
    results = driver.get_results()
    driver.stop()
    _end(link, results.error_message,
         {name: [code, stamp] for name, (code, stamp) in results.worker_results.items()})


if __name__ == "__main__":
    main(sys.argv[1:])
