"""What the launcher knows of each running instance, for the hang check: its position and its
threads' activity (its sampler's reports, ``popdist_launcher/whereabouts.py``), its process
state (the wrapper's answers to PROBE), its Horovod rank, and whether Horovod's stall inspector
names it missing (rank 0's "Missing ranks:" lines on its stderr: Horovod prints them when a
tensor waited for some ranks longer than HOROVOD_STALL_CHECK_TIME_SECONDS, under Gloo and MPI
alike); and ``Seen``, the snapshot the decision reads."""
from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from popdist_launcher.wire import position_report
from popdist_launcher.wire.position_report import KINDS


class Position(NamedTuple):
    kind: str  # one of KINDS, or "unknown" (never reported: not a Python program, or off)
    name: str = ""  # the collective ("sync > broadcast_variables") or the long phase

    def describe(self) -> str:
        if self.kind == "collective":
            return f"collective {self.name}"
        if self.kind == "long":
            return f"long phase '{self.name}'"
        return _PLACES.get(self.kind, "an unknown place")


_PLACES = {"tensorflow": "a TensorFlow step, not computing (a graph collective)",
           "computing": "a TensorFlow step, computing",
           "program": "its own code, outside any collective",
           "import": "an import (loading modules)",
           "exit": "interpreter exit, waiting for a thread"}


UNKNOWN = Position("unknown")


def position_of(text: str) -> Position:
    """A sampler's position ("collective allreduce", "tensorflow", ...)."""
    kind, _, name = text.partition(" ")
    return Position(kind, name) if kind in KINDS else UNKNOWN


class Report(NamedTuple):
    left: int  # times the program left a wait so far
    rank: int  # its Horovod rank, -1 before hvd.init()
    activity: str  # position_report.ACTIVITIES
    position: Position
    detail: str  # "main thread in gen at prog.py:41"


def parse_report(payload: bytes) -> Optional[Report]:
    """A WHERE frame's report; None if it is not one."""
    try:
        left, rank, activity, where, detail = position_report.decode(
            payload.decode("utf-8", "replace"))
    except ValueError:
        return None
    return Report(left, rank, activity, position_of(where), detail)


class Seen(NamedTuple):
    """One running instance as the decision reads it (times in seconds, up to now)."""
    position: Position = UNKNOWN
    activity: str = "unknown"  # position_report.ACTIVITIES, or "unknown" (no report yet)
    detail: str = ""
    position_s: float = 0.0  # in this position for so long
    activity_s: float = 0.0  # with this activity for so long
    state: str = ""  # its process state at the last probes (R, S, D, T, t), "" unknown
    state_s: float = 0.0  # found in that state by every probe for so long
    missing: str = ""  # the tensors Horovod's stall inspector names it missing from
    rank: int = -1


class Track:
    """The launcher's running record of one instance."""

    def __init__(self, now: float) -> None:
        self.report: Optional[Report] = None
        self.position_at = now
        self.activity_at = now
        self.state = ""
        self.state_at = now
        self.work = -1  # its main thread's CPU ticks and characters read and written, -1 unknown
        self.missing = ""
        self.missing_at: Optional[float] = None  # the last time Horovod named it

    def update(self, report: Report, now: float) -> Tuple[bool, bool]:
        """Take a new report; (its position changed, it left a wait since the last one)."""
        before = self.report
        self.report = report
        moved = before is None or before.position != report.position
        if moved:
            self.position_at = now
        if before is None or before.activity != report.activity:
            self.activity_at = now
        left = before is not None and report.left > before.left
        if left or moved:
            self.named_missing("", None)  # it moved on since Horovod named it
        return moved, left

    def named_missing(self, tensors: str, now: Optional[float]) -> None:
        """Horovod's stall inspector names it missing from ``tensors`` at ``now`` ("", None:
        no longer)."""
        self.missing = f"'{tensors}'" if tensors else ""
        self.missing_at = now

    def probed(self, answer: str, now: float) -> None:
        """The wrapper's answer to a probe: "STATE WORK" (or a bare state letter). An
        uninterruptible wait (D) whose main thread worked since the last probe (CPU, or a read
        or a write done) is I/O under way: its time in D starts again."""
        state, _, work_text = answer.strip().partition(" ")
        state = state[:1]
        try:
            work = int(work_text)
        except ValueError:
            work = -1
        progressed = state == "D" and work >= 0 and self.work >= 0 and work != self.work
        if state != self.state or progressed:
            self.state, self.state_at = state, now
        self.work = work

    def seen(self, now: float, missing_for: float) -> Seen:
        report = self.report
        missing = self.missing if self.missing_at is not None and \
            now - self.missing_at <= missing_for else ""
        if report is None:
            return Seen(state=self.state, state_s=now - self.state_at, missing=missing)
        return Seen(report.position, report.activity, report.detail, now - self.position_at,
                    now - self.activity_at, self.state, now - self.state_at, missing,
                    report.rank)


_RANK_LINE = re.compile(r"^\s*(\d+): \[(.*)\]\s*$")


class MissingRanks:
    """Reads Horovod's stall inspector's lines on one instance's stderr ("Missing ranks:",
    then "RANK: [TENSOR, ...]" per missing rank) and calls ``found(rank, tensors)``."""

    def __init__(self) -> None:
        self._partial: Dict[int, bytes] = {}
        self._inside: Dict[int, bool] = {}

    def feed(self, index: int, data: bytes) -> List[Tuple[int, str]]:
        """The (rank, tensors) pairs complete in ``data`` (instance ``index``'s stderr)."""
        found = []
        text = self._partial.pop(index, b"") + data
        lines = text.split(b"\n")
        if lines[-1]:
            self._partial[index] = lines[-1][-8192:]
        for raw in lines[:-1]:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if line.rstrip().endswith("Missing ranks:"):
                self._inside[index] = True
                continue
            if self._inside.get(index):
                match = _RANK_LINE.match(line)
                if match:
                    found.append((int(match[1]), match[2]))
                    continue
                self._inside[index] = False
        return found
