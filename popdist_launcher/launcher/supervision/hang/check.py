"""The hang check the supervisor feeds (an instance started, reported where it is or its
progress, answered a probe, wrote to stderr, ended; a new round) and asks (``deadline``,
``tick``): every second it takes the evidence on the running instances (``evidence.py``), asks
the decision (``decision.py``) and cuts the hung ones: each is named (index, rank, pid, kind,
evidence, where its peers wait, the bound), its Python stacks printed (not for a stopped
process, which writes none), and handed to its world, which treats it as a dead one. It also
turns a collectives watchdog's STALL report into the job's failure.

The supervisor is reached only through ``Port`` (``SupervisorPort`` for the real one), so the
check is tested with a fake one."""
from __future__ import annotations

from typing import Dict, List, Optional, Protocol

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.supervision.attempt import TIMEOUT_EXIT_CODE, Failure, Instance
from popdist_launcher.launcher.supervision.hang.bounds import Clock, stall_check_s
from popdist_launcher.launcher.supervision.hang.decision import (BOUND_OF, Hung, Verdict, decide,
                                                                 describe_groups)
from popdist_launcher.launcher.supervision.hang.evidence import (UNKNOWN, MissingRanks, Track,
                                                                 parse_report)
from popdist_launcher.wire import protocol as p

TICK_S = 1.0  # how often the evidence is judged
PROBE_EVERY_S = 5.0  # how often the wrappers are asked for their program's process state


class Port(Protocol):
    """What the check needs of the supervisor."""

    def running(self) -> List[Instance]:
        """The instances that run now (connected, started, not ending)."""

    def probe(self, inst: Instance) -> None:
        """Ask ``inst``'s wrapper for its program's process state (an answer comes to
        ``probed``)."""

    def collect_stacks(self, insts: Optional[List[Instance]], reason: str, then: str,
                       keep=None, after=None) -> bool:
        """Collect the Python stacks of ``insts`` (None: every instance); False when a
        collection runs already."""

    def stacks_of(self, index: int) -> str:
        """The last stacks collected from instance ``index``."""

    def cut(self, inst: Instance) -> None:
        """Hand a hung ``inst`` to its world (it kills it; its end is a failure)."""

    def instance(self, index: int) -> Instance:
        """Instance ``index``."""


class SupervisorPort:
    """``Port`` over the supervisor."""

    def __init__(self, sup) -> None:
        self.sup = sup

    def running(self) -> List[Instance]:
        return [i for i in self.sup.instances if i.conn is not None and i.pid is not None
                and not i.settled and not i.stopped]

    def probe(self, inst: Instance) -> None:
        self.sup.send(inst, p.PROBE)

    def collect_stacks(self, insts, reason, then, keep=None, after=None) -> bool:
        if self.sup.stacks.dump is not None:
            return False
        self.sup.stacks.request(self.sup.instances if insts is None else insts, reason, then,
                                keep=keep, after=after)
        return True

    def stacks_of(self, index: int) -> str:
        return self.sup.router.stacks.get(index, "")

    def cut(self, inst: Instance) -> None:
        self.sup.world.hung(inst)

    def instance(self, index: int) -> Instance:
        return self.sup.instances[index]


class HangCheck:
    def __init__(self, port: Port, timeout: Optional[float],
                 busy_timeout: Optional[float] = None) -> None:
        self.port = port
        self.clock = Clock(timeout, busy_timeout)
        self.tracks: Dict[int, Track] = {}
        self.missing = MissingRanks()
        self.ended_at: Optional[float] = None  # when a peer last ended well (exit 0)
        self.next_tick: Optional[float] = None
        self.next_probe = 0.0
        self.stall: Optional[Failure] = None  # an instance's watchdog reported a stall

    # ---- fed by the supervisor -------------------------------------------------------------
    def started(self, inst: Instance, now: float) -> None:
        self.tracks[inst.index] = Track(now)
        if self.clock.last is None:
            self.clock.event(now, under_way=False)
        if self.next_tick is None and self.clock.on:
            self.next_tick = now + TICK_S
            self.next_probe = now + PROBE_EVERY_S

    def where(self, inst: Instance, payload: bytes, now: float) -> None:
        """A WHERE frame (the program's sampler)."""
        found = parse_report(payload)
        track = self.tracks.get(inst.index)
        if found is None or track is None:
            return
        moved, left = track.update(found, now)
        if moved or left:
            self.clock.event(now, under_way=left)

    def progress(self, inst: Instance, now: float) -> None:
        self.clock.event(now)

    def probed(self, inst: Instance, payload: bytes, now: float) -> None:
        track = self.tracks.get(inst.index)
        if track is not None:
            track.probed(payload.decode("ascii", "replace"), now)

    def output(self, inst: Instance, data: bytes, now: float) -> None:
        """``inst``'s stderr: Horovod's stall inspector's "Missing ranks" lines (rank 0)."""
        for rank, tensors in self.missing.feed(inst.index, data):
            index = self._index_of(rank)
            track = self.tracks.get(index) if index is not None else None
            if track is not None:
                track.named_missing(tensors, now)

    def ended(self, inst: Instance, now: float, well: bool) -> None:
        """``inst`` ended (``well``: exit status 0)."""
        self.tracks.pop(inst.index, None)
        if well and inst.name != "evaluator":
            self.ended_at = now

    def restart(self, now: float) -> None:
        """A new round: its instances start again."""
        self.clock.restart(now)
        self.ended_at = None
        for track in self.tracks.values():
            track.position_at = track.activity_at = now
            track.named_missing("", None)

    # ---- asked by the supervisor -----------------------------------------------------------
    def deadline(self) -> Optional[float]:
        return self.next_tick if self.clock.on else None

    def tick(self, now: float) -> None:
        if self.next_tick is None or now < self.next_tick:
            return
        self.next_tick = now + TICK_S
        running = self.port.running()
        if not running:
            return
        if now >= self.next_probe:
            self.next_probe = now + PROBE_EVERY_S
            for inst in running:
                self.port.probe(inst)
        self.judge(running, now)

    def judge(self, running: List[Instance], now: float) -> None:
        bounds = self.clock.bounds()
        # the --evaluator's process joins no collective: it neither waits nor is waited for
        members = [i for i in running if i.name != "evaluator" and not i.hung
                   and i.index in self.tracks]
        missing_for = 3.0 * stall_check_s(self.clock.timeout) + 5.0
        seen = {i.index: self.tracks[i.index].seen(now, missing_for) for i in members}
        alone_s = now - self.ended_at if self.ended_at is not None else None
        found = decide(seen, bounds, alone_s, lambda i: self.port.instance(i).who)
        if found.hung:
            self.cut(found, seen)

    # ---- the verdict -----------------------------------------------------------------------
    def explain(self, hung: Hung, found: Verdict, rank: int) -> str:
        inst = self.port.instance(hung.index)
        ident = (f"rank {rank}, " if rank >= 0 else "") + f"pid {inst.pid}"
        which = BOUND_OF[hung.kind]
        limit = getattr(self.clock.bounds(), which)
        if which == "long" and limit != self.clock.timeout:
            how = "--hang-busy-timeout" if limit == self.clock.busy_timeout else \
                "the default busy bound"
        else:
            how = "--hang-timeout" if self.clock.timeout else "the default hang bound"
        peers = f"; its peers waited ({found.peers})" if found.peers else ""
        return f"was hung ({hung.kind}): {hung.evidence}{peers}; {ident}; bound {limit:g} s ({how})"

    def cut(self, found: Verdict, seen) -> None:
        """Name each hung instance, print its stacks (not a stopped one's), then hand it to its
        world, which kills it."""
        insts = []
        for hung in found.hung:
            inst = self.port.instance(hung.index)
            if inst.settled or inst.stopped or inst.hung:
                continue
            inst.hung = self.explain(hung, found, seen[hung.index].rank)
            insts.append(inst)
        if not insts:
            return
        stacks = any(h.kind != "stopped" for h in found.hung)
        if len(insts) > 1:
            for inst in insts:
                console.say(f"hang check: {inst.who} (host {inst.host}) {inst.hung}")

        def then() -> None:
            for inst in insts:
                text = self.port.stacks_of(inst.index)
                if stacks and text.strip():
                    lines = [console.line(f"hang check: the Python stacks of {inst.who} (host "
                                          f"{inst.host}, pid {inst.pid}), which is hung:")]
                    lines.extend(f"    {line}" for line in text.rstrip("\n").splitlines())
                    console.write("\n".join(lines))
            for inst in insts:
                if not inst.settled and not inst.stopped:
                    self.port.cut(inst)

        if not stacks or not self.port.collect_stacks(insts, "hang check", "hang", after=then):
            then()

    # ---- a collectives watchdog's stall ----------------------------------------------------
    def on_stall(self, inst: Instance, reason: str, live: bool, now: float) -> None:
        """A STALL frame while the job is ``live`` (starting or running): the first one is the
        job's failure once every instance's stacks are in."""
        if self.stall is not None or not live:
            return
        self.stall = self.stall_failure(inst, reason, now)
        console.say(f"{inst.who} reports a stalled collective ({reason}); collecting every "
                    f"instance's Python stacks.")
        self.port.collect_stacks(None, f"{inst.who} reported a stall: {reason}", "stall",
                                 keep=inst.index)

    def stall_failure(self, inst: Instance, reason: str, now: float) -> Failure:
        """``inst``'s collectives watchdog fired (``reason``): the job's failure (exit code
        124, as for --timeout), naming the stall and, from where every instance is, the
        instance(s) that never joined."""
        running = [i.index for i in self.port.running() if i.index in self.tracks]
        seen = {i: self.tracks[i].seen(now, 1e9) for i in running}
        positions = {i: s.position for i, s in seen.items()}
        who = lambda i: self.port.instance(i).who  # noqa: E731
        outside = [i for i in running if i != inst.index and
                   positions[i].kind not in ("collective", "tensorflow", "computing")
                   and positions[i] != UNKNOWN]
        if outside and positions.get(inst.index, UNKNOWN).kind == "collective":
            named = "; never joined: " + ", ".join(f"{who(i)} ({positions[i].describe()})"
                                                   for i in outside)
            culprit: Optional[int] = outside[0]
        else:
            others = [i for i in running if i != inst.index]
            named = "; the others were: " + describe_groups(positions, others, who) \
                if others else ""
            culprit = None
        cause = report.Cause(f"a collective stalled: {inst.who} (host {inst.host}) waited "
                             f"too long ({reason.split(';', 1)[0]}){named}.", culprit)
        return Failure(cause, TIMEOUT_EXIT_CODE, "stall")

    def _index_of(self, rank: int) -> Optional[int]:
        for index, track in self.tracks.items():
            if track.report is not None and track.report.rank == rank:
                return index
        return rank if rank in self.tracks else None
