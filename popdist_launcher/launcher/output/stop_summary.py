"""The closing lines of a job stopped by a signal (Ctrl-C): which instances were running when it
came, how each ended, and what the programs reported saving (``report_progress``: the number of
the checkpoint ``tf.train.CheckpointManager`` wrote, the IPUEstimator's global step)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.output.twins import instance_ranges


def stop_summary(signal_name: str, running: Sequence[int], ends: Dict[int, report.InstanceEnd],
                 progress: Dict[int, Optional[int]], logs: Optional[str] = None) -> str:
    """The summary's text: ``running`` were the instances not yet ended when the signal came,
    ``progress`` the highest number each program reported, ``logs`` the attempt's log folder."""
    numbered = [i for i in ends if not ends[i].name]
    lines = ["", console.line(f"===== job stopped by {signal_name} =====")]
    if running:
        who = ", ".join([instance_ranges(i for i in running if i in numbered)] +
                        [ends[i].name for i in running if i not in numbered])
        lines.append(console.line(f"running when it came: instance(s) {who} of "
                                  f"{len(numbered)}."))
    else:
        lines.append(console.line("no instance was running when it came."))
    how: List[str] = []
    for index, end in sorted(ends.items()):
        words = report.describe(end)
        if end.how == "stopped" or (end.returncode is not None and end.returncode < 0):
            words += " (stopped)"
        how.append(f"{end.name or index}: {words}")
    lines.append(console.line("ended: " + "; ".join(how) + "."))
    reported = {i: step for i, step in progress.items() if step is not None}
    if reported:
        best = max(reported.values())
        by = instance_ranges(i for i, step in reported.items() if step == best)
        lines.append(console.line(
            f"saved: the last progress reported is {best}, by instance(s) {by} (the number of "
            f"the latest checkpoint tf.train.CheckpointManager wrote, the IPUEstimator's global "
            f"step, or what the program gave popdist_launcher.report_progress)."))
    else:
        lines.append(console.line(
            "saved: no instance reported progress (no checkpoint written through "
            "tf.train.CheckpointManager, no IPUEstimator step, no report_progress call)."))
    if logs:
        lines.append(console.line(f"every instance's output is in {logs}."))
    return "\n".join(lines)
