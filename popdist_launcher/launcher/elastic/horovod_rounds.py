"""The workers and rounds of a Horovod elastic job as the launcher saw them, and the summary
and verdict printed at the job's end."""
from __future__ import annotations

import signal
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.output import report
from popdist_launcher.launcher.elastic.summary import Entry, write
from popdist_launcher.launcher.layout.hosts import host_text
from popdist_launcher.launcher.supervision.attempt import Instance, JobResult, JobState
from popdist_launcher.launcher.output.routing import STDERR, STDOUT, Router
from popdist_launcher.wire import helper_frames as frames


class Worker:
    """One worker the driver asked for (a START), and how it ended."""

    def __init__(self, start: frames.Start) -> None:
        self.wid = start.wid
        self.round = start.round
        self.hostname = start.hostname
        self.rank = start.rank
        self.size = start.size
        self.local_rank = start.local_rank
        self.inst: Optional[Instance] = None  # set once the supervisor has it
        self.ended_round: Optional[int] = None
        self.how = ""  # "exited", "lost", "start-failed", "not-started"
        self.code: Optional[int] = None
        self.blame = ""
        self.detail = ""

    def describe(self) -> str:
        if self.inst is not None and self.inst.hung:
            return self.inst.hung + "; killed with SIGKILL"
        if self.how == "exited":
            return report.describe_exit(self.inst.returncode)
        return self.detail or self.how


class Round:
    """One rendezvous round of Horovod's driver: its size and hosts, and what happened."""

    def __init__(self, number: int, size: int, hosts: Sequence[Sequence]) -> None:
        self.number = number
        self.size = size
        self.hosts = [(str(h), int(n)) for h, n in hosts]
        self.started = time.time()
        self.events: List[str] = []  # what happened during it, for the summary

    @property
    def layout(self) -> str:
        return host_text(self.hosts)


class Ending(NamedTuple):
    """What the launcher knows at the job's end, besides the rounds and workers."""

    result: JobResult  # the open-world supervisor's
    fatal: Optional[str]  # why the launcher gave up, if it did
    done: Optional[frames.Done]  # the driver's DONE: its results per slot and its error, if any
    lost: Dict[str, str]  # hosts lost, and why
    min_np: int = 1  # --min-np: what the hosts without a failure must carry to outlive it


def summary(rounds: List[Round], workers: Dict[int, Worker], ending: Ending,
            router: Router) -> Tuple[int, str]:
    """The job's exit code, and the summary of every round that ends with the verdict (the
    summary writer of both modes, ``summary.py``)."""
    entries = []
    for r in rounds:
        started = [str(w.wid) for w in workers.values() if w.round == r.number]
        when = time.strftime('%H:%M:%S', time.localtime(r.started))
        entries.append(Entry(f"round {r.number} ({when}): {r.size} instance(s) on {r.layout}; "
                             f"instances started: {', '.join(started) or 'none'}", r.events))
    result = ending.result
    if result.state in (JobState.INTERRUPTED, JobState.FAILED):
        code = result.exit_code
        verdict = (f"job interrupted ({signal.Signals(result.signal_received).name})."
                   if result.state is JobState.INTERRUPTED else
                   "job failed: see the root cause above.")
    else:
        code, verdict = _verdict(rounds, workers, ending, router)
    return code, write("round", entries, verdict)


def _verdict(rounds: List[Round], workers: Dict[int, Worker], ending: Ending,
             router: Router) -> Tuple[int, str]:
    failed = [w for w in workers.values() if w.blame in ("host", "slot")]
    if ending.fatal is not None:
        lost = "; ".join(f"{h} ({why})" for h, why in ending.lost.items())
        causes = "; ".join(f"instance {w.wid} on {w.hostname} {w.describe()}"
                           for w in failed[-4:])
        return 1, f"job failed: {ending.fatal}" + (f" Hosts lost: {lost}." if lost else "") + \
            (f" Last failures: {causes}." if causes else "")
    done = ending.done or frames.Done(error=None, results={})
    results = done.results or {}
    failing = sorted(((stamp, name, code) for name, (code, stamp) in results.items()
                      if code != 0))
    if done.error:
        code = failed[-1].code if failed else 1
        text = f"job failed: {done.error}"
        if failed:
            text += _tail(failed[-1], router)
        return code or 1, text
    outlived = _outlived(failing, results, rounds, workers, ending.min_np)
    if outlived:
        return 0, outlived
    if failing:
        _, name, code = failing[0]
        # the last worker of the slot, named as Horovod names it: host[local_rank]
        found = [w for w in workers.values() if f"{w.hostname}[{w.local_rank}]" == name]
        text = f"job failed: {name} exited with {code}"
        if found:
            text += _tail(found[-1], router)
        return code, text
    last_round = rounds[-1] if rounds else None
    return 0, (f"job succeeded: every worker of round {last_round.number} exited 0 "
               f"({last_round.size} on {last_round.layout})." if last_round else
               "job succeeded.")


def _outlived(failing: List[Tuple[float, str, int]], results: dict, rounds: List[Round],
              workers: Dict[int, Worker], min_np: int) -> Optional[str]:
    """The verdict of a job whose last round both succeeded (a worker exited 0: Horovod's driver
    ends the job on the first success) and had failures, when those failures are ones any other
    round outlives: the hosts without a failure carry --min-np, so the failure policy would only
    have blacklisted the failed hosts and the job gone on. A worker the launcher stopped, or
    whose host the discovery script removed, is no failure of its host. None: the failures
    decide, as horovodrun's do (its job fails on any non-zero exit in the last round, so its
    outcome would depend on whether a tolerated failure falls just before the end)."""
    if not failing or not rounds or not any(code == 0 for code, _ in results.values()):
        return None
    last = rounds[-1]
    latest = {f"{w.hostname}[{w.local_rank}]": w for w in sorted(workers.values(),
                                                                  key=lambda w: w.wid)}
    blamed = {name.rsplit("[", 1)[0] for _, name, _ in failing
              if name not in latest or latest[name].blame != "none"}
    carried = sum(slots for host, slots in last.hosts if host not in blamed)
    if blamed and carried < min_np:
        return None
    said = "; ".join(f"{name} " + (latest[name].describe() if name in latest else
                                   f"exited with {code}") for _, name, code in failing)
    kept = host_text([(host, slots) for host, slots in last.hosts if host not in blamed])
    why = (f"the hosts without a failure ({kept}) carry --min-np {min_np}, so the job outlives "
           f"them as it does in any round" if blamed else
           "the launcher stopped those workers, or their host left the job")
    return (f"job succeeded: round {last.number}'s workers on {kept or last.layout} exited 0; "
            f"its failures ({said}) do not fail the job: {why}.")


def _tail(worker: Worker, router: Router) -> str:
    lines = router.tail(worker.inst.index, STDERR) or router.tail(worker.inst.index, STDOUT)
    if not lines:
        return f" (instance {worker.wid} on {worker.hostname} wrote nothing)."
    return f" (instance {worker.wid} on {worker.hostname}); its last line(s):\n" + \
        "\n".join(f"    {line}" for line in lines)
