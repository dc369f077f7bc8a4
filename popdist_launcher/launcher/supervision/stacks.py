"""Collecting every running instance's Python stacks through its wrapper: on SIGQUIT (printed,
the job goes on), when --timeout expires and when an instance reports a stalled collective."""
from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, NamedTuple, Optional, Set

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.supervision.attempt import Instance, InstanceState
from popdist_launcher.launcher.supervision.hub import Hub
from popdist_launcher.launcher.output.routing import Router
from popdist_launcher.wire import protocol as p

DUMP_WAIT_SECONDS = 4.0  # how long stacks are waited for


class Dump(NamedTuple):
    reason: str
    then: str  # "print", "timeout", "stall" or "hang"
    deadline: float
    waiting: set
    after: Optional[Callable[[], None]] = None  # called once the collection ends


class StackCollector:
    """One collection at a time; the stacks go to ``router.stacks`` (and its logs). When one
    ends (``done``), stacks collected on request are printed with ``ends()``, and a timeout's
    collection calls ``on_timeout()``."""

    def __init__(self, router: Router, hub: Hub,
                 ends: Callable[[], Dict[int, report.InstanceEnd]] = dict,
                 on_timeout: Callable[[], None] = lambda: None) -> None:
        self.router = router
        self.hub = hub
        self.ends = ends
        self.on_timeout = on_timeout
        self.dump: Optional[Dump] = None
        self.in_report = False  # collected because of a timeout or a stall
        self.unanswered: Set[int] = set()  # asked, running, and silent until the deadline

    @property
    def deadline(self) -> Optional[float]:
        return self.dump.deadline if self.dump else None

    def collect(self, running: Iterable, reason: str, then: str,
                keep: Optional[int] = None, after: Optional[Callable[[], None]] = None) -> bool:
        """Ask each of ``running`` (instances with a connection) for its stacks; True when there
        is nobody to wait for. ``keep``: an instance whose stacks it wrote itself at the moment
        that matters (a stall's reporter, which may have moved on by the time a second dump
        would arrive)."""
        kept = self.router.stacks.get(keep) if keep is not None else None
        waiting = set()
        for inst in running:
            if not (inst.index == keep and kept):
                waiting.add(inst.index)
                self.hub.send(inst.conn, p.DUMP)
        self.router.stacks.clear()
        self.unanswered = set()
        if kept:
            self.router.stacks[keep] = kept
        self.in_report = then in ("timeout", "stall")
        self.dump = Dump(reason, then, time.monotonic() + DUMP_WAIT_SECONDS, waiting, after)
        return not waiting

    def request(self, instances: Iterable[Instance], reason: str, then: str,
                keep: Optional[int] = None, after: Optional[Callable[[], None]] = None) -> None:
        """``collect`` from those of ``instances`` that run; ``done`` at once if none does;
        ``after``: called when the collection ends."""
        running = [i for i in instances
                   if i.state is InstanceState.RUNNING and i.conn is not None]
        if self.collect(running, reason, then, keep, after):
            self.done()

    def on_stacks(self, index: int, text: str) -> bool:
        """An instance's stacks arrived; True when the collection has them all."""
        reason = self.dump.reason if self.dump else "written by the program itself"
        if text or self.dump is not None:
            self.router.add_stacks(index, text, reason)
        if self.dump is not None:
            self.dump.waiting.discard(index)
            return not self.dump.waiting
        return False

    def ended(self, index: int) -> None:
        """An instance exited: its stacks are no longer awaited."""
        if self.dump is not None:
            self.dump.waiting.discard(index)

    def finish(self) -> Optional[Dump]:
        """End the collection (all in, or its time is up); the dump, or None if none ran. The
        instances still awaited are ``unanswered``: they ran, and sent nothing in time."""
        dump, self.dump = self.dump, None
        if dump is not None:
            self.unanswered = set(dump.waiting)
        return dump

    def after_report(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the collection for a failure report (a timeout's or a
        stall's) ends, at once when none runs: a failure meanwhile stops the job only after
        every instance had its chance to send its stacks."""
        dump = self.dump
        if dump is None or not self.in_report:
            callback()
            return
        before = dump.after

        def both() -> None:
            if before is not None:
                before()
            callback()
        self.dump = dump._replace(after=both)

    def done(self) -> None:
        """End the collection, if one runs: print the stacks or call ``on_timeout``."""
        dump = self.finish()
        if dump is None:
            return
        if dump.then == "print":
            console.write(report.stacks_report(self.router.stacks, self.ends(), self.unanswered))
        elif dump.then == "timeout":
            self.on_timeout()
        if dump.after is not None:
            dump.after()
