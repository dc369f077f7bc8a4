"""Elastic restarts, for programs without Horovod's elastic protocol: when an instance or a host
fails, or the discovery script reports a change, stop every instance (grace period), blacklist a
failed host (with the cooldown), re-plan on the hosts available (--min-np .. --max-np instances,
replicas per instance kept) and start the next attempt with fresh ports and rendezvous. Whether a
failed host is blacklisted, its instances started again in place, or the job ends is the failure
policy's (``failure_policy.py``), as in Horovod mode; progress is the library's reports (a step or a
checkpoint number above the job's highest so far, ``popdist_launcher.report_progress``)."""
from __future__ import annotations

import shlex
import signal
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.agents.fixed_world import Agent
from popdist_launcher.launcher.supervision.attempt import JobResult, JobState
from popdist_launcher.launcher.elastic import failure_policy as policy
from popdist_launcher.launcher.elastic import membership, summary
from popdist_launcher.launcher.elastic.discovery.poller import FixedHosts, HostSource, Poller
from popdist_launcher.launcher.supervision.loop import EventLoop
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.supervision.supervisor import STOPPING_SIGNALS, Supervisor
from popdist_launcher.launcher.layout.topology import TopologyError

Hosts = List[Tuple[str, int]]
BELOW_MIN_EXIT_CODE = 1


class Attempt(NamedTuple):
    """One attempt, for the final summary."""

    index: int
    hosts: Tuple[str, ...]
    instances: int
    seconds: float
    outcome: str


class RestartAgent(Agent):
    """The agent of an elastic job in restart mode (``--elastic-mode restart``): it decides
    after each attempt whether the job ends, or re-forms on the hosts available now."""

    def __init__(self, options: JobOptions) -> None:
        super().__init__(options)
        elastic = options.elastic
        assert elastic is not None
        self.elastic = elastic
        self.num_instances = elastic.first_size
        self.blacklist = membership.Blacklist(elastic.cooldown_range)
        self.streaks = policy.FailureStreaks(elastic.host_failure_limit)
        self.mark = 0  # the highest step or checkpoint number the library reported so far
        self.ending: Optional[str] = None  # the policy's sentence when it ends the job
        script = elastic.discovery_script
        if script is None and elastic.cooldown_range is not None and len(elastic.hosts) > 1:
            # Fixed hosts come back after their cooldown: the same answer every second lets
            # a running attempt grow again when one does.
            script = "printf '%s\\n' " + " ".join(shlex.quote(f"{name}:{slots}")
                                                  for name, slots in elastic.hosts)
        self.poller: HostSource = Poller(script, elastic.slots_per_host) if script else \
            FixedHosts()
        self.ever_blacklisted: Set[str] = set()
        self.why_out: Dict[str, str] = {}  # host -> why it was blacklisted last
        self.members = membership.Membership(list(elastic.hosts), self.blacklist)
        self.log = membership.MembershipLog(options.output.output_dir)
        self.hosts: Hosts = _used(self.layout)
        self.attempts: List[Attempt] = []
        self.resets = 0
        self.started_at = time.monotonic()
        self.stop_reason: Optional[str] = None  # why the running attempt was stopped

    # ---- the job -----------------------------------------------------------------------------
    def run(self, print_topology: Optional[Callable[[str], None]] = None) -> int:
        if print_topology is not None:  # the first attempt's topology
            return super().run(print_topology)
        self.poller.start()
        self.log.record(f"starting {self.num_instances} instance(s) on {_names(self.hosts)} "
                        f"(attempt 0)")
        try:
            while True:
                try:
                    return super().run(print_topology)
                except TopologyError as exc:  # a host could not be probed at the start
                    code = self._unreachable(exc)
                    if code is not None:
                        return code
        finally:
            self.poller.close()

    def _supervising(self, supervisor: Supervisor) -> None:
        supervisor.failure_title = f"attempt {self.attempt} of the elastic job"
        self.started_at = time.monotonic()
        self.stop_reason = None
        self.poller.watch(supervisor.watch, self._on_discovery)

    def _decide(self, result: JobResult) -> Optional[int]:
        if self._retry_start(result):
            return None
        supervisor, self.supervisor = self.supervisor, None
        failure = supervisor.failure
        reports = [i.progress for i in supervisor.instances if i.progress is not None]
        self.mark = max([self.mark, *reports])
        if result.state is JobState.SUCCEEDED:
            self._record("succeeded")
            return self._end(0)
        if result.state is JobState.INTERRUPTED:
            self._record(f"interrupted by {signal.Signals(result.signal_received).name}")
            return self._end(result.exit_code)
        if result.state is JobState.STOPPED:
            why = self.stop_reason or "stopped"
            self._record(why)
            changes = [why]
        else:
            assert failure is not None
            why = failure.cause.headline.rstrip(".")
            self._record(why)
            if failure.kind == "timeout":
                return self._end(result.exit_code)
            change = self._blame(supervisor, why)
            if change is None:
                return self._end(result.exit_code or 1)
            changes = [change]
        return self._next_attempt(changes, result.exit_code)

    def _unreachable(self, exc: TopologyError) -> Optional[int]:
        """A host of the next attempt could not be probed: blacklist it and plan again."""
        if not exc.hosts:
            raise exc
        self._record(str(exc).rstrip("."))
        changes = []
        for host in exc.hosts:
            decision = policy.decide(policy.Fault(host, "could not be reached", True),
                                     self.members.hosts, self.elastic.min_np, self.streaks,
                                     self.mark)
            changes.append(self._blacklist(host, "could not be reached", decision.forever,
                                           decision.streak))
        return self._next_attempt(changes, 1)

    # ---- planning ----------------------------------------------------------------------------
    def _next_attempt(self, changes: List[str], exit_code: int) -> Optional[int]:
        """Plan the next attempt (None), or end the job (its exit code)."""
        limit = self.elastic.reset_limit
        if limit is not None and self.resets >= limit:
            console.say(f"--reset-limit {limit} reached; ending the job.")
            return self._end(exit_code or 1)
        hosts = self._wait_for_hosts()
        if hosts is None:
            return self._end(BELOW_MIN_EXIT_CODE)
        if isinstance(hosts, int):  # a signal while waiting
            return self._end(hosts)
        n = _fit(hosts, self.elastic.max_np)
        try:
            self.layout = self.options.layout_on(hosts, n)
        except TopologyError as exc:
            console.say(f"cannot lay out the next attempt: {exc}")
            return self._end(exit_code or 1)
        self.resets += 1
        self.attempt += 1
        self.num_instances = n
        before = {name for name, _ in self.hosts}
        self.hosts = _used(self.layout)
        after = {name for name, _ in self.hosts}
        gained = [name for name, _ in self.hosts if name not in before]
        detail = "; ".join(dict.fromkeys(c for c in changes if c))
        if gained:
            detail += f"{'; ' if detail else ''}{', '.join(gained)} added"
        lost = sorted(before - after)
        if lost and not any(name in detail for name in lost):
            detail += f"{'; ' if detail else ''}{', '.join(lost)} left out"
        self.log.record(f"{detail} -> {n} instance(s) on {_names(self.hosts)} (attempt "
                        f"{self.attempt}, POPRUN_RESTART_COUNT={self.attempt})")
        return None

    def _wait_for_hosts(self):
        """The usable hosts once they offer --min-np slots; None after --elastic-timeout s;
        128+N when a stopping signal arrives while waiting."""
        elastic = self.elastic
        hosts = self.members.usable()
        if _slots(hosts) >= elastic.min_np:
            return hosts
        deadline = time.monotonic() + elastic.elastic_timeout
        self.log.record(f"{_slots(hosts)} slot(s) usable, --min-np {elastic.min_np} needed; "
                        f"waiting up to {elastic.elastic_timeout:g} s (--elastic-timeout) for "
                        f"hosts")
        received: List[int] = []
        events = EventLoop()
        try:
            with events.signals(STOPPING_SIGNALS, received.append):
                self.poller.watch(events.watch, self._on_answers)
                while not received:
                    now = time.monotonic()
                    if now >= deadline:
                        return None
                    events.wait(min(1.0, deadline - now))
                    hosts = self.members.usable()
                    if _slots(hosts) >= elastic.min_np:
                        return hosts
                return 128 + received[0]
        finally:
            events.close()

    # ---- what happened -----------------------------------------------------------------------
    def _blame(self, supervisor: Supervisor, why: str) -> Optional[str]:
        """Ask the failure policy about the host(s) a failure is blamed on: blacklist, restart
        in place, or end (None: the job ends, its sentence kept for the summary). The
        membership line's text."""
        failure = supervisor.failure
        if failure.cause.instance is not None:
            blamed = [supervisor.instances[failure.cause.instance].host]
            host_failed = failure.kind in ("host-lost", "start-timeout")
        else:  # an engine (ssh, srun) that failed before its instances started
            blamed = list(dict.fromkeys(i.host for i in supervisor.instances
                                        if i.pid is None and i.settled))
            host_failed = True
        blamed = [self._member_name(host) for host in blamed] or [policy.JOB]
        known = [] if blamed == [policy.JOB] else self.members.hosts
        changes, restarted = [], []
        for host in blamed:
            out = [name for name, _ in known if self.blacklist.blocked(name)]
            decision = policy.decide(policy.Fault(host, why, host_failed), known,
                                     self.elastic.min_np, self.streaks, self.mark, out)
            if decision.action == policy.END:
                self.ending = f"the job ends: {decision.sentence}"  # the summary's verdict
                return None
            if decision.action == policy.BLACKLIST:
                changes.append(self._blacklist(host, why, decision.forever, decision.streak))
            else:
                restarted.append(decision)
        if restarted:  # the policy's sentence, of the longest streak
            changes.append(max(restarted, key=lambda d: d.streak).sentence)
        return "; ".join(changes)

    def _blacklist(self, host: str, why: str, forever: bool = False, streak: int = 0) -> str:
        cooldown = self.blacklist.add(host, forever)
        self.ever_blacklisted.add(host)
        self.why_out[host] = why
        until = "for the rest of the job" if cooldown is None else f"for {cooldown:.1f} s"
        if forever and self.elastic.cooldown_range is not None:
            until += f": {policy.streak_words(streak, self.streaks.limit)}"
        return f"{host} removed ({why}; blacklisted {until})"

    def _member_name(self, host: str) -> str:
        """The membership's name of an instance's host (instances on this host say localhost)."""
        names = [name for name, _ in self.hosts]
        return host if host in names or len(names) != 1 else names[0]

    def _on_answers(self) -> None:
        for answer in self.poller.read():
            self._note(self.members.on_answer(answer))

    def _on_discovery(self) -> None:
        """The discovery script answered while an attempt runs: stop the attempt when the
        answer changes its hosts (one gone, or one more usable while below --max-np)."""
        self._on_answers()
        supervisor = self.supervisor
        if supervisor is None or self.stop_reason is not None:
            return
        usable = self.members.usable()
        names = {name for name, _ in usable}
        gone = [name for name, _ in self.hosts if name not in names]
        room = self.elastic.max_np is None or self.num_instances < self.elastic.max_np
        new = [name for name, _ in usable if name not in {n for n, _ in self.hosts}]
        if gone:
            self.stop_reason = f"{', '.join(gone)} left the discovery script's hosts"
        elif new and room and _fit(usable, self.elastic.max_np) > self.num_instances:
            back = [name for name in new if name in self.ever_blacklisted]
            joined = [name for name in new if name not in self.ever_blacklisted]
            self.stop_reason = "; ".join(
                ([f"{', '.join(back)} back after its blacklist cooldown"] if back else []) +
                ([f"{', '.join(joined)} joined the discovery script's hosts"] if joined else []))
        if self.stop_reason is not None:
            supervisor.request_stop(f"{self.stop_reason}; re-forming the job")

    def _note(self, change) -> None:
        if change.warning:
            console.warn(change.warning)

    def _record(self, outcome: str) -> None:
        self.attempts.append(Attempt(self.attempt, tuple(name for name, _ in self.hosts),
                                     self.num_instances, time.monotonic() - self.started_at,
                                     outcome))

    def _end(self, code: int) -> int:
        if self.attempts and (len(self.attempts) > 1 or code):
            entries = [summary.Entry(f"attempt {a.index}: {a.instances} instance(s) on "
                                     f"{', '.join(a.hosts)}, {a.seconds:.1f} s: {a.outcome}")
                       for a in self.attempts]
            console.write(summary.write("attempt", entries, self._verdict(code)))
        return code

    def _verdict(self, code: int) -> str:
        if code == 0:
            return f"job succeeded: attempt {self.attempts[-1].index} exited 0."
        if self.ending is not None:
            return self.ending
        if code == BELOW_MIN_EXIT_CODE and not self._enough():
            return (f"the job ends: below --min-np {self.elastic.min_np} for --elastic-timeout "
                    f"{self.elastic.elastic_timeout:g} s ({self._hosts_out()}).")
        last = self.attempts[-1].outcome
        if last.startswith("interrupted"):
            return f"job {last} (exit code {code})."
        return f"job failed: {last} (exit code {code})."

    def _enough(self) -> bool:
        return _slots(self.members.usable()) >= self.elastic.min_np

    def _hosts_out(self) -> str:
        out = [name for name, _ in self.members.hosts if self.blacklist.blocked(name)]
        known = {name for name, _ in self.members.hosts}
        gone = [name for name in self.attempts[-1].hosts if name not in known]
        parts = [f"{name} blacklisted: {self.why_out.get(name, 'it failed')}" for name in out]
        if gone:
            parts.append(f"{', '.join(gone)} no longer discovered")
        return "; ".join(parts) or "no hosts left"


def _used(layout) -> Hosts:
    return [(slot.name, count) for slot, count in layout.used]


def _slots(hosts: Sequence[Tuple[str, int]]) -> int:
    return sum(slots for _, slots in hosts)


def _fit(hosts: Sequence[Tuple[str, int]], max_np: Optional[int]) -> int:
    total = _slots(hosts)
    return total if max_np is None else min(total, max_np)


def _names(hosts: Sequence[Tuple[str, int]]) -> str:
    return ", ".join(f"{name} ({count})" for name, count in hosts)
