"""The stall watchdog: ends a collective that waits too long for the other instances."""
from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from typing import Callable, Dict, Hashable, List, NamedTuple, Optional, Tuple

log = logging.getLogger(__name__)

# How many pending collectives a stall message names.
MAX_NAMED = 5


@dataclasses.dataclass
class Pending:
    """One collective that has been submitted on this instance and has not finished yet."""

    description: object  # str() gives the text (eager calls format it only when needed)
    started: float
    key: Optional[Hashable] = None  # graph-mode collectives: the op, so a re-run replaces it
    in_graph: bool = False


class ProbeValues(NamedTuple):
    """What a probe's counters say. Times are wall-clock seconds (time.time()), stamped by the
    function's own ops; 0 before the first run."""

    begun: int  # runs that reached the collective
    ended: int  # number of the last run whose collective finished
    begun_at: float  # when the latest run began
    ended_at: float  # when the latest completion happened
    gone: bool  # its function was garbage collected (the values are the last ones)


# A probe's reader. May raise: skipped this time.
ProbeReader = Callable[[], ProbeValues]


@dataclasses.dataclass
class Probe:
    """Progress counters of one collective in a tf.function, read by the watchdog thread.

    The function's own ops keep the counters (no Python runs in the step): ``begun`` counts the
    runs that reached the collective, ``ended`` is the number of the last run whose collective
    finished. A run is pending while ``begun > max(ended, forgotten)``.
    """

    description: str
    read: ProbeReader
    begun: int = 0
    ended: int = 0
    forgotten: int = 0  # runs up to this one were aborted (their step failed)
    started: Optional[float] = None  # when the pending run began (on the watchdog's clock)

    @property
    def pending(self) -> bool:
        return self.begun > max(self.ended, self.forgotten)


class ProbeRegistry:
    """The probes of every traced collective, process-wide: they outlive a watchdog (a later
    init(stall_timeout=...) makes a new one that polls the same probes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probes: List[Probe] = []

    def add(self, description: str, read: ProbeReader) -> Probe:
        probe = Probe(description, read)
        with self._lock:
            self._probes.append(probe)
        return probe

    def snapshot(self) -> List[Probe]:
        with self._lock:
            return list(self._probes)

    def discard(self, gone: List[Probe]) -> None:
        if gone:
            with self._lock:
                drop = {id(p) for p in gone}
                self._probes = [p for p in self._probes if id(p) not in drop]

    def __len__(self) -> int:
        with self._lock:
            return len(self._probes)


class StallWatchdog:
    """Tracks pending collectives; fires once when the instance stops making collective progress.

    The rule: some collective is pending and for ``timeout`` seconds none has completed (and the
    oldest pending one submitted since the last completion, if any, has waited that long). A
    completion, successful or not, is progress. ``on_stall`` receives the message and must make
    the pending collectives fail (the library shuts Horovod down).

    Three kinds of marks: eager calls call begin()/end() directly; Session graphs call them from
    two small Python callbacks in the graph (``key``: the op, so a re-run replaces its mark);
    tf.function collectives only update counters and times in the graph, which this thread
    reads every ``interval`` (``probes``), so a function step runs no Python for them. When a
    graph step is aborted by an error its "done" marks never run, so graph marks (and probe
    runs) are dropped while ``graph_running()`` says no thread is executing TensorFlow. Every
    mark carries the time its collective really began, and completions the time they really
    happened (``wall``: the clock of the probes' times), so a mark left by an aborted step is
    told from what the instance waits on even when the watchdog never saw the step end.
    """

    def __init__(self, timeout: float, on_stall: Callable[[str], None], where: str = "",
                 graph_running: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic,
                 probes: Optional[ProbeRegistry] = None,
                 wall: Callable[[], float] = time.time) -> None:
        if timeout <= 0:
            raise ValueError(f"stall timeout must be positive, got {timeout!r}")
        self.timeout = float(timeout)
        self._on_stall = on_stall
        self._where = where
        self._graph_running = graph_running
        self._clock = clock
        self._wall = wall
        self.probes = probes if probes is not None else ProbeRegistry()
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._pending: Dict[int, Pending] = {}
        self._by_key: Dict[Hashable, int] = {}
        self._last_completion = clock()
        self._stalled: Dict[int, str] = {}
        self.fired_message: Optional[str] = None
        self._stopped = threading.Event()  # set once on_stall has returned
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---- bookkeeping, called around every collective ---------------------------------------
    def begin(self, description: object, key: Optional[Hashable] = None,
              in_graph: bool = False) -> int:
        """Record that a collective was submitted (``description``: its str() names it);
        returns the token to pass to end()."""
        with self._lock:
            token = next(self._tokens)
            if key is not None:
                # The same graph op running again: its earlier mark belongs to a finished step.
                old = self._by_key.pop(key, None)
                if old is not None:
                    self._pending.pop(old, None)
                self._by_key[key] = token
            self._pending[token] = Pending(description, self._clock(), key, in_graph)
            return token

    def end(self, token: int) -> None:
        """Record that a collective finished (or failed)."""
        with self._lock:
            entry = self._pending.pop(token, None)
            if entry is not None and entry.key is not None and self._by_key.get(entry.key) == token:
                del self._by_key[entry.key]
            self._last_completion = self._clock()

    def stall_message(self, token: Optional[int]) -> Optional[str]:
        """The message the watchdog fired with, if it fired while this collective was pending."""
        with self._lock:
            return self._stalled.get(token) if token is not None else None

    def pending_descriptions(self) -> List[str]:
        with self._lock:
            return [str(p.description) for p in self._pending_entries()]

    def _pending_entries(self) -> List[Pending]:
        """Every pending collective (marks and probes), oldest first; under the lock."""
        entries = list(self._pending.values())
        entries += [Pending(p.description, p.started, in_graph=True)
                    for p in self.probes.snapshot() if p.pending and p.started is not None]
        return sorted(entries, key=lambda p: p.started)

    # ---- probes ----------------------------------------------------------------------------
    def _read_probes(self) -> List[Tuple[Probe, ProbeValues]]:
        """Current counter values of every probe (TensorFlow ops: outside the lock); the probes
        of functions that are gone are read a last time and dropped."""
        values, gone = [], []
        for probe in self.probes.snapshot():
            try:
                value = probe.read()
            except Exception:  # e.g. while the interpreter shuts down; try again next time
                log.debug("reading a collective probe failed", exc_info=True)
                continue
            values.append((probe, value))
            if value.gone:
                gone.append(probe)
        self.probes.discard(gone)
        return values

    def _apply_probes(self, values: List[Tuple[Probe, ProbeValues]], now: float,
                      forget: bool) -> None:
        """Update the probes from values read at ``now``; under the lock. A run that ended is
        progress, at the time it ended; a pending run started when its step stamped it (never
        after now); ``forget``: no graph step is running, so runs still pending were aborted,
        as are those of a function that is gone."""
        offset = now - self._wall()  # the probes' wall-clock times on the watchdog's clock
        for probe, value in values:
            if value.ended > probe.ended:
                self._last_completion = max(self._last_completion,
                                            min(now, value.ended_at + offset))
            probe.begun, probe.ended = value.begun, max(value.ended, probe.ended)
            if forget or value.gone:
                probe.forgotten = value.begun
            probe.started = min(now, value.begun_at + offset) if probe.pending else None

    # ---- the decision ----------------------------------------------------------------------
    def check(self) -> Optional[str]:
        """The stall message when the watchdog should fire now, else None (no side effects
        besides reading the probes and forgetting marks left by aborted graph steps)."""
        values = self._read_probes()
        idle = False
        if self._has_graph_marks() or any(v.begun > max(v.ended, p.ended, p.forgotten)
                                           for p, v in values):
            # The probes are read first: a step that starts after the read is not forgotten.
            idle = not self._graph_running()
        if idle:
            self._drop_graph_marks()
        with self._lock:
            now = self._clock()
            self._apply_probes(values, now, forget=idle)
            if self.fired_message is not None:
                return None
            entries = self._pending_entries()
            if not entries:
                return None
            # What the instance waits on: the collectives submitted since the last completion
            # when there are any. A mark that began before a later collective completed may be
            # left by a step that an error aborted (the watchdog need not have seen the step
            # end): it neither starts the clock nor is named.
            waiting = [p for p in entries if p.started >= self._last_completion] or entries
            quiet_since = max(waiting[0].started, self._last_completion)
            if now - quiet_since <= self.timeout:
                return None
            # Newest first: the instance waits on what it submitted last.
            entries = sorted(waiting, key=lambda p: p.started, reverse=True)
            named = ", ".join(f"{str(p.description)} (waiting {now - p.started:.1f} s)"
                              for p in entries[:MAX_NAMED])
            if len(entries) > MAX_NAMED:
                named += f" and {len(entries) - MAX_NAMED} more"
            return (
                f"collective stall{self._where}: {named}; no collective has completed on this "
                f"instance for {now - quiet_since:.1f} s (stall timeout {self.timeout:g} s). At "
                f"least one other instance did not submit the same collective (it is busy "
                f"elsewhere, hung, or called a different collective, name or order). Shutting "
                f"down Horovod so the job fails instead of hanging. To allow longer waits pass "
                f"popdist_launcher.collectives.init(stall_timeout=SECONDS) or set "
                f"POPRUN_COLLECTIVES_STALL_TIMEOUT=SECONDS (0 disables the check).")

    def _has_graph_marks(self) -> bool:
        with self._lock:
            return any(p.in_graph for p in self._pending.values())

    def _drop_graph_marks(self) -> None:
        with self._lock:
            stale = [t for t, p in self._pending.items() if p.in_graph]
            for token in stale:
                entry = self._pending.pop(token)
                if entry.key is not None and self._by_key.get(entry.key) == token:
                    del self._by_key[entry.key]
        if stale:
            log.debug("forgot %d collective mark(s) left by an aborted graph step", len(stale))

    def fire(self, message: str) -> None:
        """Mark every pending collective as stalled with ``message`` and call on_stall once."""
        with self._lock:
            if self.fired_message is not None:
                return
            self.fired_message = message
            for token in self._pending:
                self._stalled[token] = message
        log.error("%s", message)
        from popdist_launcher.stack_dump import report_stall
        report_stall(message)  # under poprun-lite: every instance's stacks in its report
        try:
            self._on_stall(message)
        except Exception:  # the watchdog thread must not die silently
            log.exception("stopping the stalled collectives failed")
        finally:
            self._stopped.set()

    def wait_stopped(self, timeout: float) -> bool:
        """After firing: wait until on_stall has returned; True unless it is still running."""
        if self.fired_message is None:
            return True
        return self._stopped.wait(timeout)

    # ---- the thread ------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="collectives-stall-watchdog",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    @property
    def interval(self) -> float:
        """How often the thread checks: a stall is reported at most about two intervals late."""
        return min(2.0, max(0.05, self.timeout / 20))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            message = self.check()
            if message is not None:
                self.fire(message)
                return
