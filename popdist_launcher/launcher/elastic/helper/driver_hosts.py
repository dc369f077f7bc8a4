"""Horovod's host discovery and host manager in the elastic driver helper, answered by the
launcher: the hosts it pushes (HOSTS), rank order as it lists them, and what a failed worker
means for its host decided by the failure policy."""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from horovod.runner.elastic.discovery import HostDiscovery, HostManager
from horovod.runner.elastic.worker import HostUpdateResult

from popdist_launcher.launcher.elastic import failure_policy as policy
from popdist_launcher.launcher.elastic.helper import horovod_seams as seams
from popdist_launcher.launcher.elastic.helper.launcher_link import LauncherLink
from popdist_launcher.wire import helper_frames as frames

Slot = Tuple[str, int]  # (hostname, local_rank): Horovod's identity of a worker


class PushedHosts(HostDiscovery):
    """Horovod's host discovery answered by the launcher's last HOSTS frame (it runs the
    discovery script, checks that hosts answer and removes the lost ones)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: Dict[str, int] = {}
        self.received = threading.Event()

    def push(self, hosts: Sequence[Sequence]) -> None:
        ordered = {str(name): int(slots) for name, slots in hosts}
        with self._lock:
            self._hosts = ordered
        self.received.set()

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._hosts)


class Verdict(NamedTuple):
    """The launcher's verdict on the end of one worker, kept for the registry's blacklist call."""

    wid: int
    on_host: bool  # the host is to blame (lost, could not start, all its workers failed)
    mark: int  # the job's progress mark when it ended (the commits the launcher has seen)
    what: str  # how it ended, in words ("exited with 1")


class LauncherHostManager(HostManager):
    """Horovod's HostManager with two changes: rank order follows HOSTS (hosts of the previous
    assignment first, in their order, then new ones in the order HOSTS lists them; Horovod
    orders new hosts through a set), and what a failed worker means for its host is the failure
    policy's (``failure_policy.py``): blacklist (with the cooldown, or for the rest of the job
    once the host reached --host-failure-limit), start the worker again in place (RETRY), or end the
    job with one sentence (FATAL)."""

    def __init__(self, discovery: HostDiscovery, cooldown_range=None) -> None:
        super().__init__(discovery, cooldown_range)
        self.link: Optional[LauncherLink] = None  # set by the driver before any round
        # set by the driver before any round:
        self.min_np = 1
        self.streaks = policy.FailureStreaks(1)
        self.give_up: Callable[[str], None] = lambda reason: None
        self._cooldown_range = cooldown_range
        self._blame_lock = threading.Lock()
        self._verdicts: Dict[Slot, Verdict] = {}

    def update_available_hosts(self) -> HostUpdateResult:
        previous = set(seams.current_hosts(self).host_assignment_order)
        result = super().update_available_hosts()
        # Horovod keeps the previous hosts first, in their order, and appends new ones in set
        # order: put the new ones in the order HOSTS lists them.
        listed = list(seams.current_hosts(self).host_slots)
        order = seams.current_hosts(self).host_assignment_order
        new = sorted((h for h in order if h not in previous), key=listed.index)
        order[:] = [h for h in order if h in previous] + new
        return result

    def blame(self, slot: Slot, verdict: Optional[Verdict]) -> None:
        """Record the launcher's verdict on the last failed exit of ``slot``'s worker (None: it
        did not fail, or a new worker took the slot)."""
        with self._blame_lock:
            if verdict is None:
                self._verdicts.pop(slot, None)
            else:
                self._verdicts[slot] = verdict

    def blacklist(self, host: str) -> None:
        """Horovod's name (its worker registry calls it once per failed slot): what happens is
        the failure policy's, in :meth:`decide_for_failed_host`."""
        self.decide_for_failed_host(host)

    def decide_for_failed_host(self, host: str) -> None:
        """A worker on ``host`` failed: blacklist the host, start the worker again in place
        (RETRY) or end the job (FATAL), as the failure policy decides."""
        with self._blame_lock:
            verdicts = [(slot, v) for slot, v in self._verdicts.items() if slot[0] == host]
            for slot, _ in verdicts:
                del self._verdicts[slot]
        if not verdicts:
            return  # the registry calls it once per failed slot: the first call decided
        last = verdicts[-1][1]
        hosts = self.current_hosts
        known = [(h, hosts.get_slots(h)) for h in hosts.host_assignment_order]
        out = [h for h in hosts.host_slots if h != host and self.is_blacklisted(h)]
        decision = policy.decide(
            policy.Fault(host, f"instance {last.wid} on {host} {last.what}",
                         any(v.on_host for _, v in verdicts)),
            known, self.min_np, self.streaks, max(v.mark for _, v in verdicts), out)
        if decision.action == policy.BLACKLIST:
            self._take_out(host, decision.forever)
        elif decision.action == policy.RESTART:
            self.link.send(frames.Retry(host=host, wid=last.wid, streak=decision.streak,
                                        limit=self.streaks.limit, sentence=decision.sentence))
        else:
            self.give_up(decision.sentence)

    def _take_out(self, host: str, forever: bool) -> None:
        was_blacklisted = self.is_blacklisted(host)
        super().blacklist(host)
        if forever and self._cooldown_range:
            # Horovod keeps the end of the cooldown only in the host's state (0.28.x): a host
            # at --host-failure-limit never comes back.
            seams.never_end_cooldown(self, host)
        if not was_blacklisted or forever:
            cooldown = None
            if self._cooldown_range and not forever:
                ends = seams.cooldown_end(self, host)
                cooldown = round(max(0.0, ends - time.time()), 3)
            self.link.send(frames.Blacklist(host=host, cooldown=cooldown, forever=forever,
                                            limit=self.streaks.limit))
