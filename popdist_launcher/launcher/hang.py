"""Hung instances (--hang-timeout): an instance whose process stopped running (SIGSTOP, a wait
in the kernel) while the job makes no progress holds every peer in its next collective for ever;
it is found here and its world treats it as it treats a dead one.

Progress is what the library reports (``popdist_launcher.report_progress``: the IPUEstimator's
global step, a ``CheckpointManager`` save, a Horovod elastic commit). The bound: --hang-timeout
SECONDS when given (0: off); by default HANG_FACTOR times the longest interval between two
reports of one instance seen lately, never below HANG_FLOOR_S, and off until an instance has
reported twice (a program that reports nothing is never called hung). Once no instance has
reported for the bound, every running instance's wrapper is asked for its program's process
state (PROBE); an instance whose program is stopped (T) is hung, as is one found in an
uninterruptible wait (D) by two probes in a row, PROBE_WAIT_S apart (a short disk wait is no
hang). When none is, the job goes on (its peers may be starting, or compiling) and the clock
starts again. Pure bookkeeping: the supervisor sends the probes and acts on the verdicts.
"""
from __future__ import annotations

from typing import Dict, List, Optional

HANG_FLOOR_S = 30.0  # the default bound is never shorter
HANG_FACTOR = 5.0  # ... and is this many times the longest interval between reports
PROBE_WAIT_S = 2.0  # for the wrappers' answers
HUNG_STATES = {"T": "stopped", "t": "stopped by a tracer", "D": "in an uninterruptible wait"}


class HangWatch:
    """The job's progress clock and the probes of one check."""

    def __init__(self, timeout: Optional[float]) -> None:
        self.timeout = timeout  # None: the default bound; 0: off
        self.last: Optional[float] = None  # the job's last progress (or the clock's restart)
        self._per_instance: Dict[int, float] = {}  # index -> its last report
        self._intervals: Dict[int, float] = {}  # index -> its last interval between reports
        self.probing_until: Optional[float] = None
        self.answers: Dict[int, str] = {}
        self.asked: List[int] = []
        self._waiting: List[int] = []  # in D at the last probe: hung if still there at the next

    def bound(self) -> Optional[float]:
        """Seconds without progress before a check; None: no check (off, or not known yet)."""
        if self.timeout is not None:
            return self.timeout or None
        if not self._intervals:
            return None
        return max(HANG_FLOOR_S, HANG_FACTOR * max(self._intervals.values()))

    def progress(self, index: int, now: float) -> None:
        """Instance ``index`` reported progress at ``now``."""
        before = self._per_instance.get(index)
        if before is not None:
            self._intervals[index] = now - before
        self._per_instance[index] = now
        self.last = now
        self.probing_until = None

    def restart(self, now: float) -> None:
        """The clock starts again (a new round: its workers may be starting)."""
        if self.last is not None:
            self.last = now
        self.probing_until = None

    def forget(self, index: int) -> None:
        """Instance ``index`` ended: its intervals no longer count."""
        self._per_instance.pop(index, None)
        self._intervals.pop(index, None)

    def deadline(self) -> Optional[float]:
        if self.probing_until is not None:
            return self.probing_until
        bound = self.bound()
        if bound is None or self.last is None:
            return None
        return self.last + bound

    def due(self, now: float) -> bool:
        """The bound passed without progress: probe (the caller sends PROBE to ``asked``)."""
        if self.probing_until is not None:
            return False
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def probe(self, indices: List[int], now: float) -> None:
        self.asked = list(indices)
        self.answers = {}
        self.probing_until = now + PROBE_WAIT_S

    def answer(self, index: int, state: str) -> bool:
        """A wrapper's answer; True once every asked instance answered."""
        if self.probing_until is None or index not in self.asked:
            return False
        self.answers[index] = state
        return all(i in self.answers for i in self.asked)

    def verdict(self, now: float) -> Dict[int, str]:
        """The hung instances of this check (index -> how its process is), and the clock
        starts again."""
        hung = {i: HUNG_STATES[s] for i, s in self.answers.items()
                if s in "Tt" or (s == "D" and i in self._waiting)}
        self._waiting = [i for i, s in self.answers.items() if s == "D" and i not in hung]
        self.probing_until = None
        bound = self.bound() or 0.0
        # a process in D for the first time: probe again soon rather than after a whole bound
        self.last = now - bound + PROBE_WAIT_S if self._waiting else now
        return hung
