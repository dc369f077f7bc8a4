"""The supervisor's hang check: the instances' whereabouts and progress go to the clock
(``hang.py``); once nothing moved for the bound, the wrappers are probed, the verdict taken
(stopped processes, then ``hang_decision.py``), and each hung instance is named (index, rank,
host, pid, how long, where its peers wait), its Python stack printed, and handed to its world,
which treats it as a dead one."""
from __future__ import annotations

import time
from typing import Dict, List, Optional

from popdist_launcher.launcher import console, report
from popdist_launcher.launcher.attempt import TIMEOUT_EXIT_CODE, Failure, Instance
from popdist_launcher.launcher.hang import HangWatch
from popdist_launcher.launcher.hang_decision import UNKNOWN, Verdict, describe_groups, parse
from popdist_launcher.wire import protocol as p


class HangCheck:
    """``sup``: the supervisor (its instances, ``send``, its stack collector and world)."""

    def __init__(self, sup, watch: HangWatch) -> None:
        self.sup = sup
        self.watch = watch
        self.ranks: Dict[int, int] = {}  # index -> its Horovod rank, as its sampler saw it
        self.since: Dict[int, float] = {}  # index -> when its position last changed
        self.stall: Optional[Failure] = None  # an instance's watchdog reported a stall

    def on_where(self, inst: Instance, payload: bytes) -> None:
        """A WHERE frame: "LEFT RANK POSITION"."""
        text = payload.decode("utf-8", "replace")
        left, _, rest = text.partition(" ")
        rank, _, rest = rest.partition(" ")
        try:
            if int(rank) >= 0:
                self.ranks[inst.index] = int(rank)
        except ValueError:
            return
        count, position = parse(f"{left} {rest}")
        now = time.monotonic()
        self.since[inst.index] = now
        self.watch.moved(inst.index, count, position, now)

    def on_deadline(self, now: float) -> None:
        """Probe every running instance once the job made no progress for the bound; act on
        the answers when they are in (or PROBE_WAIT_S passed)."""
        watch = self.watch
        if watch.probing_until is not None and now >= watch.probing_until:
            self.verdict(now)
        elif watch.due(now):
            running = self.running()
            if not running:
                watch.restart(now)
                return
            watch.probe([i.index for i in running], now)
            for inst in running:
                self.sup.send(inst, p.PROBE)

    def on_probed(self, inst: Instance, payload: bytes) -> None:
        if self.watch.answer(inst.index, payload.decode("ascii", "replace")):
            self.verdict(time.monotonic())

    def running(self) -> List[Instance]:
        return [i for i in self.sup.instances if i.conn is not None and i.pid is not None
                and not i.settled and not i.stopped]

    def verdict(self, now: float) -> None:
        watch = self.watch
        bound = watch.bound() or 0.0
        states = dict(watch.answers)
        stopped = watch.verdict(now)
        how = "--hang-timeout" if watch.timeout else "the default hang bound"
        hung: Dict[int, str] = {}
        for index, state in stopped.items():
            hung[index] = (f"made no progress for {bound:g} s while its peers waited (its "
                           f"process was {state}; {how})")
        if hung:
            self.cut(hung, stacks=False)  # a stopped process writes no stack
            return
        # the --evaluator's process joins no collective: it neither waits nor is waited for
        running = [i.index for i in self.running() if i.name != "evaluator"]
        found = watch.where(running)
        if not found.hung:
            console.debug("nothing moved for %g s; no instance is hung (%s; process states "
                          "%s): waiting", bound, found.note, states)
            return
        self.cut({i: self.explain(i, found, now, bound, how) for i in found.hung}, stacks=True)

    def explain(self, index: int, found: Verdict, now: float, bound: float, how: str) -> str:
        position = self.watch.positions[index]
        held = now - self.since.get(index, now)
        rank = self.ranks.get(index, -1)
        pid = self.sup.instances[index].pid
        peers = describe_groups(self.watch.positions, list(found.peers_at),
                                lambda i: self.sup.instances[i].who)
        ident = (f"rank {rank}, " if rank >= 0 else "") + f"pid {pid}"
        if found.why == "absent":
            what = (f"it ran its own code, outside any collective, for {held:.0f} s while its "
                    f"peers waited ({peers}")
        elif index in found.peers_at:
            what = (f"the instances waited in different collectives, none in the majority, "
                    f"for {held:.0f} s ({peers}")
        else:
            what = (f"it waited in {position.describe()} for {held:.0f} s while its peers "
                    f"waited in another ({peers}")
        return f"was hung: {what}; {ident}; nothing in the job moved for {bound:g} s: {how})"

    def cut(self, hung: Dict[int, str], stacks: bool) -> None:
        """Print each hung instance's stack (``stacks``), then hand it to its world, which
        names it and kills it."""
        insts = [self.sup.instances[i] for i in hung if not self.sup.instances[i].settled
                 and not self.sup.instances[i].stopped]
        for inst in insts:
            inst.hung = hung[inst.index]

        def then() -> None:
            for inst in insts:
                text = self.sup.router.stacks.get(inst.index, "")
                if stacks and text.strip():
                    lines = [console.line(f"hang check: the Python stacks of {inst.who} (host "
                                          f"{inst.host}, pid {inst.pid}), which is hung:")]
                    lines.extend(f"    {line}" for line in text.rstrip("\n").splitlines())
                    console.write("\n".join(lines))
            for inst in insts:
                if not inst.settled and not inst.stopped:
                    self.sup.world.hung(inst)

        collector = self.sup.stacks
        if not insts or not stacks or collector.dump is not None:  # none, or one runs already
            then()
            return
        collector.request(insts, "hang check", "hang", after=then)

    def on_stall(self, inst: Instance, reason: str, live: bool) -> None:
        """A STALL frame while the job is ``live`` (starting or running): the first one is the
        job's failure once every instance's stacks are in."""
        if self.stall is not None or not live:
            return
        self.stall = self.stall_failure(inst, reason)
        console.say(f"{inst.who} reports a stalled collective ({reason}); collecting every "
                    f"instance's Python stacks.")
        if self.sup.stacks.dump is None:  # the job's failure, when it comes, is the stall
            self.sup.stacks.request(self.sup.instances, f"{inst.who} reported a stall: "
                                    f"{reason}", "stall", keep=inst.index)

    def stall_failure(self, inst: Instance, reason: str) -> Failure:
        """``inst``'s collectives watchdog fired (``reason``): the job's failure (exit code
        124, as for --timeout), naming the stall and, from where every instance is, the
        instance(s) that never joined."""
        running = [i.index for i in self.running()]
        found = self.watch.where(running)
        who = lambda i: self.sup.instances[i].who  # noqa: E731
        if found.hung and inst.index not in found.hung:
            absent = ", ".join(f"{who(i)} ({self.watch.positions[i].describe()})"
                               for i in found.hung)
            named = f"; never joined: {absent}"
        else:
            others = [i for i in running if i != inst.index]
            named = ("; the others were: " + describe_groups(
                {i: self.watch.positions.get(i, UNKNOWN) for i in others}, others, who)) \
                if others else ""
        culprit = found.hung[0] if found.hung and inst.index not in found.hung else None
        cause = report.Cause(f"a collective stalled: {inst.who} (host {inst.host}) waited "
                             f"too long ({reason.split(';', 1)[0]}){named}.", culprit)
        return Failure(cause, TIMEOUT_EXIT_CODE, "stall")
