"""The one end-of-job summary of elastic jobs, in both modes: a header naming how many attempts
(restart mode) or rounds (Horovod mode) the job ran, one line per attempt or round with what
happened during it, and the verdict, one sentence."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from popdist_launcher.launcher.output.console import line


class Entry(NamedTuple):
    """One attempt or round: its line, and what happened during it (one line each)."""

    head: str
    events: Sequence[str] = ()


def write(unit: str, entries: Sequence[Entry], verdict: str) -> str:
    """The summary's text (``unit``: "attempt" or "round"), ending with ``verdict``."""
    lines = ["", line(f"===== elastic job: {len(entries)} {unit}(s) =====")]
    for entry in entries:
        lines.append(line(entry.head))
        lines.extend(line(f"    {event}") for event in entry.events)
    lines.append(line(verdict))
    return "\n".join(lines)
