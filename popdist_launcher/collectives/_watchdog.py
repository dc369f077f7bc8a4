"""The stall watchdog: ends a collective that waits too long for the other instances."""
from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from typing import Callable, Dict, Hashable, List, Optional

log = logging.getLogger(__name__)

# How many pending collectives a stall message names.
MAX_NAMED = 5


@dataclasses.dataclass
class Pending:
    """One collective that has been submitted on this instance and has not finished yet."""

    description: str
    started: float
    key: Optional[Hashable] = None  # graph-mode collectives: the op, so a re-run replaces it
    in_graph: bool = False


class StallWatchdog:
    """Tracks pending collectives; fires once when the instance stops making collective progress.

    The rule: some collective is pending and for ``timeout`` seconds none has completed (and the
    oldest pending one has waited that long). A completion, successful or not, is progress.
    ``on_stall`` receives the message and must make the pending collectives fail (the library
    shuts Horovod down). Graph-mode collectives (tf.function, Session) are marked by ops in the
    graph; when a graph step is aborted by an error their "done" mark never runs, so such marks
    are dropped while ``graph_running()`` says no thread is executing TensorFlow.
    """

    def __init__(self, timeout: float, on_stall: Callable[[str], None], where: str = "",
                 graph_running: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if timeout <= 0:
            raise ValueError(f"stall timeout must be positive, got {timeout!r}")
        self.timeout = float(timeout)
        self._on_stall = on_stall
        self._where = where
        self._graph_running = graph_running
        self._clock = clock
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
    def begin(self, description: str, key: Optional[Hashable] = None,
              in_graph: bool = False) -> int:
        """Record that a collective was submitted; returns the token to pass to end()."""
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
            return [p.description for p in sorted(self._pending.values(), key=lambda p: p.started)]

    # ---- the decision ----------------------------------------------------------------------
    def check(self) -> Optional[str]:
        """The stall message when the watchdog should fire now, else None (no side effects
        besides forgetting marks left by aborted graph steps)."""
        if self._has_graph_marks() and not self._graph_running():
            self._drop_graph_marks()
        with self._lock:
            if self.fired_message is not None or not self._pending:
                return None
            now = self._clock()
            oldest = min(p.started for p in self._pending.values())
            quiet_since = max(oldest, self._last_completion)
            if now - quiet_since <= self.timeout:
                return None
            entries = sorted(self._pending.values(), key=lambda p: p.started)
            # Name the collectives submitted since the last completion when there are any: older
            # marks may be left over from a failed graph step.
            fresh = [p for p in entries if p.started >= self._last_completion]
            entries = fresh or entries
            named = ", ".join(f"{p.description} (waiting {now - p.started:.1f} s)"
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

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, max(0.05, self.timeout / 4))):
            message = self.check()
            if message is not None:
                self.fire(message)
                return
