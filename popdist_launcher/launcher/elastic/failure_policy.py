"""The one failure policy of elastic jobs, asked by restart mode (``agents/elastic_restart.py``),
Horovod mode (``agents/elastic_horovod.py``) and the driver helper
(``elastic/helper/elastic_driver.py``) alike: given the host a failure is blamed on, the hosts
and their slots, --min-np, the failure streaks and the job's progress, it answers blacklist,
restart in place, or end (with the sentence).

The rules, in order:

1. A failure of host H counts towards --host-failure-limit unless the job made progress since
   H's previous failure (its progress mark grew: a newer step or checkpoint reported by the
   library in restart mode, a commit in Horovod mode). Wall time is never progress.
2. The host itself failed (lost, unreachable, its instances could not start), or the other
   usable hosts carry --min-np alone: H is blacklisted (with the cooldown, if any); once H has
   failed --host-failure-limit times in a row without progress it is blacklisted for the rest
   of the job, so that no cooldown brings it back into the same failure for ever.
3. Otherwise the other hosts cannot carry --min-np, and blacklisting H would only wait out
   --elastic-timeout: H's failed slots start again in place, until H has failed
   --host-failure-limit times in a row without progress; then the job ends, with the sentence.

Pure: no processes, no clock, no I/O.
"""
from __future__ import annotations

from typing import Collection, Dict, NamedTuple, Optional, Sequence, Tuple

BLACKLIST = "blacklist"
RESTART = "restart"  # in place: the same hosts, the failed slots started again
END = "end"

JOB = "the job"  # the streak's key for a failure no host is blamed for (an engine's)


class FailureStreaks:
    """Each host's failures in a row without progress (--host-failure-limit), and the job's
    progress mark at its last failure: a failure after the mark grew starts the count at 1."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: Dict[str, int] = {}
        self._marks: Dict[str, int] = {}

    def record(self, host: str, mark: int) -> int:
        """Count one failure of ``host`` with the job's progress mark ``mark`` now; return its
        failures in a row without progress, this one included."""
        progressed = host in self._marks and mark > self._marks[host]
        count = 1 if progressed else self._counts.get(host, 0) + 1
        self._counts[host] = count
        self._marks[host] = mark
        return count

    def count(self, host: str) -> int:
        return self._counts.get(host, 0)

    def reached(self, host: str) -> bool:
        return self.count(host) >= self.limit


class Fault(NamedTuple):
    """One failure: the host it is blamed on, what happened in words ("instance 1 was killed
    by SIGKILL (host hostA)"), and whether the host itself failed (lost, unreachable, could
    not start its instances) rather than the program on it."""

    host: str
    what: str
    host_failed: bool = False


class Decision(NamedTuple):
    """The policy's answer: ``action`` (BLACKLIST, RESTART, END), the host, its streak,
    whether a blacklist is for the rest of the job, and the sentence that says why."""

    action: str
    host: str
    streak: int
    forever: bool
    sentence: str


def decide(fault: Fault, hosts: Sequence[Tuple[str, int]], min_np: int,
           streaks: FailureStreaks, mark: int,
           blacklisted: Collection[str] = ()) -> Decision:
    """What follows ``fault``: ``hosts`` are the job's known hosts with their slots,
    ``blacklisted`` those out now, ``mark`` the job's progress mark (any number that grows
    with the job's state: steps, checkpoints, commits). Records the failure in ``streaks``."""
    host, limit = fault.host, streaks.limit
    streak = streaks.record(host, mark)
    reached = streak >= limit
    others = sum(slots for name, slots in hosts if name != host and name not in blacklisted)
    in_a_row = streak_words(streak, limit)
    if host != JOB and (fault.host_failed or others >= min_np):
        if reached:
            why = (f"{fault.what}; {host} blacklisted for the rest of the job ({in_a_row})")
        else:
            why = f"{fault.what}; {host} blacklisted"
        return Decision(BLACKLIST, host, streak, reached, why)
    if reached:
        carry = ("no host is blamed, so the job cannot go on without it" if host == JOB else
                 f"the other hosts cannot carry --min-np {min_np} "
                 f"({others} usable slot(s) without {host})")
        return Decision(END, host, streak, False,
                        f"{fault.what}, the {ordinal(streak)} failure of {host} in a row "
                        f"without progress (--host-failure-limit {limit}), and {carry}.")
    return Decision(RESTART, host, streak, False,
                    f"{fault.what}; restarting in place ({in_a_row})")


def streak_words(streak: int, limit: int) -> str:
    """Where a failure stands against --host-failure-limit, in words. (The first failure after
    progress starts the count again: "1 in a row without progress" there read as "no progress
    was seen".)"""
    if streak == 1:
        return f"failure 1 of --host-failure-limit {limit}, counted again from 1 after progress"
    return f"failure {streak} of --host-failure-limit {limit} with no progress between them"


def progressed(mark: int, since: Optional[int]) -> bool:
    """Whether a progress mark grew since an earlier one (None: none was taken)."""
    return since is not None and mark > since


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
