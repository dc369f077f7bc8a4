"""The hang check's bounds, one per kind of evidence, and the clock that learns the job's own
intervals.

- ``short``: a stopped process (T, or D at every probe) and an instance left alone (its peers
  ended): SHORT_S, or --hang-timeout.
- ``wait``: an instance absent from the collective its peers wait in, or blocked (no CPU, no
  I/O, every thread of its own code in a wait only another process can end): WAIT_S, or
  --hang-timeout.
- ``long``: an instance busy in its own code while its peers wait: --hang-busy-timeout
  (LONG_S by default), never less than --hang-timeout.
By default each is also at least FACTOR times the longest interval between two of the job's
events (progress reports, completed waits, position changes) of the last LEARN_WINDOW_S, so a
job whose own phases are long gets longer bounds; a given --hang-timeout is used as it is. The
clock learns only once the job is under way: from its first progress report or completed wait
after each start or round (starting up, importing TensorFlow on a loaded machine, is no
interval of the job).
"""
from __future__ import annotations

import collections
from typing import Deque, Mapping, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.wire.stack_pipe import WHEREABOUTS_ENV

SHORT_S = 30.0
WAIT_S = 180.0
LONG_S = 600.0
FACTOR = 5.0
LEARN_WINDOW_S = 1800.0
HOROVOD_STALL_ENV = "HOROVOD_STALL_CHECK_TIME_SECONDS"
HOROVOD_STALL_DEFAULT_S = 60


class Bounds(NamedTuple):
    short: float
    wait: float
    long: float


class Clock:
    """The bounds of one attempt or round: given (``timeout`` seconds; 0 off) or learned."""

    def __init__(self, timeout: Optional[float], busy_timeout: Optional[float] = None) -> None:
        self.timeout = timeout
        self.busy_timeout = busy_timeout
        self.last: Optional[float] = None
        self.under_way = False  # a progress report or a completed wait came since the start
        self._intervals: Deque[Tuple[float, float]] = collections.deque()  # (end, interval)

    @property
    def on(self) -> bool:
        return self.timeout != 0

    def event(self, now: float, under_way: bool = True) -> None:
        """One of the job's events happened at ``now`` (``under_way``: one that shows the job
        under way, a progress report or a completed wait)."""
        if not self.under_way:
            self.under_way, self.last = under_way, now
            return
        if self.last is not None:
            self._intervals.append((now, now - self.last))
            while self._intervals and self._intervals[0][0] < now - LEARN_WINDOW_S:
                self._intervals.popleft()
        self.last = now

    def restart(self, now: float) -> None:
        """A new round: the gap before it is no interval of the job, nor is its start-up."""
        self.last, self.under_way = now, False

    def learned(self) -> float:
        return FACTOR * max((i for _, i in self._intervals), default=0.0)

    def bounds(self) -> Bounds:
        long = self.busy_timeout if self.busy_timeout else LONG_S
        if self.timeout:
            return Bounds(self.timeout, self.timeout, max(long, self.timeout))
        learned = self.learned()
        return Bounds(max(SHORT_S, learned), max(WAIT_S, learned), max(long, learned))


def stall_check_s(timeout: Optional[float]) -> int:
    """Horovod's stall-check interval that makes its "Missing ranks" lines come within the
    wait bound (about three per bound; Horovod's own 60 s by default)."""
    wait = timeout if timeout else WAIT_S
    return max(1, min(HOROVOD_STALL_DEFAULT_S, int(wait / 3)))


def environment(timeout: Optional[float], environ: Mapping[str, str],
                exported: Sequence[Tuple[str, str]] = ()) -> Tuple[Tuple[str, str], ...]:
    """What every instance's environment gets for the hang check: no sampler when it is off;
    Horovod's stall check often enough when it is on (unless the user set it)."""
    if timeout == 0:
        return ((WHEREABOUTS_ENV, "0"),)
    given = dict(exported)
    interval = stall_check_s(timeout)
    if HOROVOD_STALL_ENV in environ or HOROVOD_STALL_ENV in given or \
            interval == HOROVOD_STALL_DEFAULT_S:
        return ()
    return ((HOROVOD_STALL_ENV, str(interval)),)
