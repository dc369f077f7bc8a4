"""What the launcher prints when an attempt ends: the failure report (``report.py``) when it
failed, the stop summary (``stop_summary.py``) when a signal stopped it, else nothing."""
from __future__ import annotations

import signal
from typing import Dict, List, Sequence

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.supervision.attempt import Instance, Outcome
from popdist_launcher.launcher.output.routing import STDERR, STDOUT, Router
from popdist_launcher.launcher.output.stop_summary import stop_summary
from popdist_launcher.launcher.supervision.stacks import StackCollector


def write_attempt_end(outcome: Outcome, instances: Sequence[Instance], router: Router,
                      ends: Dict[int, report.InstanceEnd], collector: StackCollector,
                      title: str, running_at_signal: List[int]) -> None:
    """Write the attempt's closing text: ``ends`` are the instances' ends, ``collector`` what
    collected the stacks (they are in the report when a timeout or a stall asked for them),
    ``title`` what the failure report says failed, ``running_at_signal`` the instances not ended
    at the signal."""
    failure = outcome.failure
    if failure is not None:
        tails = {i.index: {STDERR: router.tail(i.index, STDERR),
                           STDOUT: router.tail(i.index, STDOUT)} for i in instances}
        first_errors = {i.index: router.first_error(i.index) for i in instances}
        stacks = router.stacks if collector.in_report else {}
        console.write(report.failure_report(failure.cause, ends, tails, stacks, title,
                                            first_errors, collector.unanswered))
    elif outcome.signal is not None:
        logs = router.logs.folder if router.logs is not None else None
        console.write(stop_summary(signal.Signals(outcome.signal).name, running_at_signal, ends,
                                   {i.index: i.progress for i in instances}, logs))
