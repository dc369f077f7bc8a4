"""Hung instances (--hang-timeout, on by default): an instance that stopped running (SIGSTOP,
a wait in the kernel), spins in its own code, waits on a lock or a read, or waits in another
collective than its peers holds every peer in its next collective for ever; it is found here
and its world treats it as it treats a dead one.

The job's progress clock moves with what the library reports (``report_progress``: the
IPUEstimator's global step, a ``CheckpointManager`` save, a Horovod elastic commit) and with
every change of an instance's whereabouts (``whereabouts.py``: its sampler tells the launcher
when the program enters or leaves a collective, a TensorFlow step, a long phase or its own
code). The bound: --hang-timeout SECONDS when given (0: off); by default HANG_FACTOR times the
longest interval between two such events of the job seen in the last LEARN_WINDOW_S, never
below HANG_FLOOR_S; FIRST_STEP_S (or more, if learned) until the job is past its first step
(a progress report, or an instance that left a wait twice). Once nothing moved for the bound,
every running instance's wrapper is asked for its program's process state (PROBE): one that is
stopped (T) is hung, as is one found in an uninterruptible wait (D) by two probes in a row,
PROBE_WAIT_S apart (a short disk wait is no hang). When none is, the instances' positions
decide (``hang_decision.py``). When no one is hung, the job goes on and the clock starts again.
Pure bookkeeping: the supervisor sends the probes and acts on the verdicts.
"""
from __future__ import annotations

import collections
from typing import Deque, Dict, List, Optional, Tuple

from popdist_launcher.launcher.hang_decision import Position, Verdict, decide

HANG_FLOOR_S = 30.0  # the default bound is never shorter
HANG_FACTOR = 5.0  # ... and is this many times the longest interval between events
FIRST_STEP_S = 120.0  # the default bound until the job is past its first step
LEARN_WINDOW_S = 1800.0  # intervals older than this no longer count
PROBE_WAIT_S = 2.0  # for the wrappers' answers
HUNG_STATES = {"T": "stopped", "t": "stopped by a tracer", "D": "in an uninterruptible wait"}


class HangWatch:
    """The job's progress clock and the probes of one check."""

    def __init__(self, timeout: Optional[float]) -> None:
        self.timeout = timeout  # None: the default bound; 0: off
        self.last: Optional[float] = None  # the job's last event (or the clock's (re)start)
        self._intervals: Deque[Tuple[float, float]] = collections.deque()  # (end, interval)
        self.past_first = False
        self.positions: Dict[int, Position] = {}  # index -> where its sampler says it is
        self.left: Dict[int, int] = {}  # index -> how often it left a wait
        self.probing_until: Optional[float] = None
        self.answers: Dict[int, str] = {}
        self.asked: List[int] = []
        self._waiting: List[int] = []  # in D at the last probe: hung if still there at the next

    def bound(self) -> Optional[float]:
        """Seconds without progress before a check; None: no check (off, or not known yet)."""
        if self.timeout is not None:
            return self.timeout or None
        learned = HANG_FACTOR * max((i for _, i in self._intervals), default=0.0)
        return max(HANG_FLOOR_S if self.past_first else FIRST_STEP_S, learned)

    def _event(self, now: float) -> None:
        if self.last is not None and self.past_first:
            self._intervals.append((now, now - self.last))
            while self._intervals and self._intervals[0][0] < now - LEARN_WINDOW_S:
                self._intervals.popleft()
        self.last = now
        self.probing_until = None

    def progress(self, index: int, now: float) -> None:
        """Instance ``index`` reported progress at ``now``."""
        self.past_first = True
        self._event(now)

    def moved(self, index: int, left: int, position: Position, now: float) -> None:
        """Instance ``index``'s sampler: it is at ``position``, having left a wait ``left``
        times."""
        self.positions[index] = position
        self.left[index] = left
        if left >= 2:
            self.past_first = True
        self._event(now)

    def start(self, now: float) -> None:
        """An instance runs: the clock starts, if it had not."""
        if self.last is None:
            self.last = now

    def restart(self, now: float) -> None:
        """The clock starts again (a new round: its workers may be starting)."""
        if self.last is not None:
            self.last = now
        self.past_first = False
        self.probing_until = None

    def forget(self, index: int) -> None:
        """Instance ``index`` ended: where it was no longer counts."""
        self.positions.pop(index, None)
        self.left.pop(index, None)

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

    def where(self, indices: List[int]) -> Verdict:
        """Who is hung among the running ``indices``, from where they are (after ``verdict``
        found no stopped process)."""
        return decide({i: self.positions.get(i, Position("unknown")) for i in indices})

    def verdict(self, now: float) -> Dict[int, str]:
        """The stopped instances of this check (index -> how its process is), and the clock
        starts again."""
        hung = {i: HUNG_STATES[s] for i, s in self.answers.items()
                if s in "Tt" or (s == "D" and i in self._waiting)}
        self._waiting = [i for i, s in self.answers.items() if s == "D" and i not in hung]
        self.probing_until = None
        bound = self.bound() or 0.0
        # a process in D for the first time: probe again soon rather than after a whole bound
        self.last = now - bound + PROBE_WAIT_S if self._waiting else now
        return hung
