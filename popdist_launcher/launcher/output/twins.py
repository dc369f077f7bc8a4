"""Identical start-up lines of several instances, held a moment on their way to the console so
that each is shown once with the instances that wrote it; no I/O, no clock (the caller gives
the time).

Only recognised start-up lines are held (``startup_lines.twin_key``), and only for
``WINDOW_SECONDS`` (``NOTICE_WINDOW_SECONDS`` for a notice), or until every instance still
writing that stream has written the line.
Every other line passes at once, after the held log lines of its own instance and stream (an
instance's lines keep their order, but for the notices, which tell nothing of the program),
and a line that began in one chunk is finished by the next chunk unheld. TensorFlow's start-up
notices are shown at most once per job (``shown`` outlives the attempt's router).
"""
from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional, Set, Tuple, Union

from popdist_launcher.launcher.output import startup_lines

WINDOW_SECONDS = 0.5  # how long a C++ log line waits for its twins
# ... and one of TensorFlow's start-up notices: longer, as instances import TensorFlow up to a
# second or two apart on a loaded machine, and a notice delays nothing but itself (the
# instance's next line on that stream shows it)
NOTICE_WINDOW_SECONDS = 2.0


class Group(NamedTuple):
    """One line as several instances (``indices``, in arrival order) wrote it to ``stream``."""

    stream: str
    indices: Tuple[int, ...]
    line: bytes  # the first instance's copy, with its "\n"


class Passed(NamedTuple):
    """Bytes of one instance's stream to show as they are."""

    index: int
    stream: str
    data: bytes


Shown = Union[Group, Passed]


class _Pending:
    __slots__ = ("stream", "key", "indices", "line", "deadline", "notice")

    def __init__(self, stream: str, key: bytes, index: int, line: bytes, deadline: float,
                 notice: bool) -> None:
        self.stream, self.key, self.line, self.deadline = stream, key, line, deadline
        self.indices = [index]
        self.notice = notice


class Twins:
    """Held start-up lines of one attempt. ``writers(stream)`` gives the instances whose
    ``stream`` is shown and still open: a line all of them wrote is shown at once."""

    def __init__(self, writers, shown: Optional[Set[bytes]] = None) -> None:
        self._writers = writers
        self.shown: Set[bytes] = shown if shown is not None else set()  # notices shown this job
        self._pending: List[_Pending] = []
        self._mid_line: Set[Tuple[int, str]] = set()

    @property
    def deadline(self) -> Optional[float]:
        return min(p.deadline for p in self._pending) if self._pending else None

    def feed(self, index: int, stream: str, data: bytes, now: float) -> List[Shown]:
        """What to show now of ``data``, a chunk of ``index``'s ``stream``, in order."""
        out: List[Shown] = []
        passed: List[bytes] = []

        def pass_on(piece: bytes) -> None:
            if not passed:  # the instance's held log lines come first (notices need not)
                out.extend(self._release(lambda p: index in p.indices and p.stream == stream
                                         and not p.notice))
            passed.append(piece)

        def end_passed() -> None:
            if passed:
                out.append(Passed(index, stream, b"".join(passed)))
                passed.clear()

        start = 0
        if (index, stream) in self._mid_line:
            cut = data.find(b"\n") + 1
            if not cut:
                return [Passed(index, stream, data)]
            self._mid_line.discard((index, stream))
            pass_on(data[:cut])
            start = cut
        while start < len(data):
            cut = data.find(b"\n", start) + 1
            if not cut:
                pass_on(data[start:])
                self._mid_line.add((index, stream))
                break
            line = data[start:cut]
            start = cut
            key = startup_lines.twin_key(line)
            if key is None:
                pass_on(line)
                continue
            end_passed()
            out.extend(self._hold(index, stream, key, line, now))
        end_passed()
        return out

    def _hold(self, index: int, stream: str, key: bytes, line: bytes,
              now: float) -> List[Shown]:
        if key in self.shown:
            return []  # a notice this job has shown already
        notice = startup_lines.is_notice(line)
        for pending in self._pending:
            if pending.stream == stream and pending.key == key and (
                    notice or index not in pending.indices):
                if index not in pending.indices:  # (a notice an instance repeats: once)
                    pending.indices.append(index)
                return self._release(lambda p: p is pending and self._complete(p))
        window = NOTICE_WINDOW_SECONDS if notice else WINDOW_SECONDS
        self._pending.append(_Pending(stream, key, index, line, now + window, notice))
        return self._release(lambda p: p is self._pending[-1] and self._complete(p))

    def _complete(self, pending: _Pending) -> bool:
        return set(self._writers(pending.stream)) <= set(pending.indices)

    def _release(self, which) -> List[Shown]:
        out, kept = [], []
        for pending in self._pending:
            (out if which(pending) else kept).append(pending)
        self._pending = kept
        for pending in out:
            if pending.notice:
                self.shown.add(pending.key)
        return [Group(p.stream, tuple(p.indices), p.line) for p in out]

    def due(self, now: float) -> List[Shown]:
        """The held lines whose window has passed."""
        return self._release(lambda p: now >= p.deadline)

    def closed(self, index: int, stream: str) -> List[Shown]:
        """``index``'s ``stream`` ended (the caller no longer counts it among the writers):
        the held lines it was the last one missing from."""
        self._mid_line.discard((index, stream))
        return self._release(lambda p: p.stream == stream and self._complete(p))

    def release_all(self) -> List[Shown]:
        return self._release(lambda p: True)


def instance_ranges(indices: Iterable[int]) -> str:
    """``0-3,5``: sorted indices with runs written as ranges."""
    runs: List[List[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)

