"""Which hosts an elastic job may use now: the discovery script's last good answer, less the
blacklist (Horovod's cooldown rule), and the log of membership changes. (A host's failures in
a row without progress are the failure policy's, ``failure_policy.py``.)"""
from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.elastic.discovery.poller import Answer, Hosts


class Blacklist:
    """Hosts excluded after a failure, with Horovod's cooldown rule
    (``horovod/runner/elastic/discovery.py``, ``HostState``): the n-th time a host is
    blacklisted (n = 1, 2, ...) it stays out for ``clamp(low * 2**n + U(0,1) * low, low, high)``
    seconds; blacklisting it again during its cooldown changes nothing. Without a cooldown range
    a blacklisted host never comes back.
    """

    def __init__(self, cooldown_range: Optional[Tuple[int, int]],
                 clock: Callable[[], float] = time.monotonic, rng=None) -> None:
        if rng is None:
            import random

            rng = random.Random()
        self.cooldown_range = cooldown_range
        self._clock = clock
        self._rng = rng
        self._count: Dict[str, int] = {}
        self._until: Dict[str, Optional[float]] = {}  # None: for the rest of the job

    def add(self, host: str, forever: bool = False) -> Optional[float]:
        """Blacklist ``host`` (``forever``: for the rest of the job, whatever the cooldown
        range); return its cooldown in seconds (the time left of the current one if it is in
        one), or None when it is out for the rest of the job."""
        now = self._clock()
        if forever:
            self._until[host] = None
            return None
        if host in self._until and (self._until[host] is None or self._until[host] > now):
            return None if self._until[host] is None else self._until[host] - now
        if self.cooldown_range is None:
            self._until[host] = None
            return None
        low, high = self.cooldown_range
        count = self._count.get(host, 0) + 1
        self._count[host] = count
        cooldown = max(low, min(high, low * 2.0 ** min(count, 64) + self._rng.random() * low))
        self._until[host] = now + cooldown
        return cooldown

    def blocked(self, host: str) -> bool:
        """True while ``host`` is blacklisted and its cooldown has not ended."""
        if host not in self._until:
            return False
        until = self._until[host]
        return until is None or until > self._clock()

    def returned(self) -> List[str]:
        """Hosts whose cooldown ended since the last call, in the order they were blacklisted."""
        now = self._clock()
        ended = [h for h, until in self._until.items() if until is not None and until <= now]
        for host in ended:
            del self._until[host]
        return ended


class Change(NamedTuple):
    """What differs from what the caller last saw: hosts that became usable or gained slots,
    hosts that stopped being usable or lost slots, and a warning to show (or None)."""
    added: List[str]
    removed: List[str]
    warning: Optional[str]


class Membership:
    """The hosts an elastic job may use now: the last good discovery answer minus blacklisted
    hosts. Hosts keep the order they became usable in (Horovod's rule: older hosts first, so
    rank 0 stays where it is; a host back from its cooldown comes last)."""

    def __init__(self, initial: Hosts, blacklist: Blacklist) -> None:
        self.hosts: Hosts = list(initial)
        self.blacklist = blacklist
        self._order: List[str] = []
        self._seen = self._refresh()
        self._warned: Set[str] = set()

    def _refresh(self) -> Dict[str, int]:
        slots = dict(self.hosts)
        kept = [h for h in self._order if h in slots and not self.blacklist.blocked(h)]
        known = set(kept)
        kept += [h for h in slots if h not in known and not self.blacklist.blocked(h)]
        self._order = kept
        return {h: slots[h] for h in kept}

    def usable(self) -> Hosts:
        """(host, slots) of the usable hosts, in order (the first is rank 0's)."""
        self._seen = self._refresh()
        return list(self._seen.items())

    def on_answer(self, answer: Answer) -> Change:
        """Take one discovery answer. A failed one keeps the last good answer and brings one
        warning per kind until the next good answer."""
        warning = None
        if answer.hosts is not None:
            self.hosts = list(answer.hosts)
            self._warned.clear()
        elif answer.kind not in self._warned:
            self._warned.add(answer.kind)
            warning = answer.error
        before, now = self._seen, self._refresh()
        self._seen = now
        return Change([h for h in now if now[h] > before.get(h, 0)],
                      [h for h in before if before[h] > now.get(h, 0)], warning)


class MembershipLog:
    """Membership events, to the console and to
    ``<output_dir>/membership.log`` (created on the first record, one line at a time)."""

    def __init__(self, output_dir: Optional[str]) -> None:
        self.path = os.path.join(output_dir, "membership.log") if output_dir else None

    def record(self, text: str) -> None:
        now = datetime.now().astimezone()
        console.say(f"[{now:%H:%M:%S}.{now.microsecond // 1000:03d}] {text}")
        if self.path is not None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(f"{now.isoformat(timespec='milliseconds')} {text}\n")
