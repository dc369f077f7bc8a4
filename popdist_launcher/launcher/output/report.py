"""The root-cause report printed when a job fails: which instance (or engine), where, how it
ended, the last lines it wrote, and every instance's Python stacks when they were collected."""
from __future__ import annotations

import signal
from typing import Collection, Dict, List, NamedTuple, Optional, Sequence

from popdist_launcher import tf_config
from popdist_launcher.launcher.output import console

# TensorFlow's errors for a TF1 graph-mode program run eagerly (Optimizer.minimize of a loss
# tensor, tf.gradients, Tensor.op; tf.compat.v1.placeholder; make_initializable_iterator).
EAGER_ERRORS = ("when eager execution is enabled", "is not compatible with eager execution",
                "is not supported in eager mode")
TF1_HINT = ("this looks like a TensorFlow 1 program (graph mode) run with TensorFlow 2's eager "
            "execution: run it with --tf1 (TensorFlow 1.15's behaviour, as Graphcore's TF1 SDKs), "
            "or call tf.compat.v1.disable_v2_behavior() at its start.")
# One line each, when an instance's last lines show the error: (errors, hint).
HINTS = ((EAGER_ERRORS, TF1_HINT), ((tf_config.NO_CHIEF_ERROR,), tf_config.NO_CHIEF_HINT))


class InstanceEnd(NamedTuple):
    """How one instance ended, as the report tells it."""

    index: int
    host: str
    pid: Optional[int]
    returncode: Optional[int]  # None: never started, or lost
    how: str  # "exited", "stopped" (by the launcher), "lost", "not started"
    name: str = ""  # a process beside the instances: "evaluator"

    @property
    def who(self) -> str:
        return self.name or f"instance {self.index}"


class Cause(NamedTuple):
    """What ended the job: an instance, an engine, the start or job timeout, a stall."""

    headline: str
    instance: Optional[int] = None
    engine_lines: Sequence[str] = ()


def describe_exit(returncode: int) -> str:
    """``exited with code N`` or ``was killed by SIGNAME`` (negative: killed by that signal)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def describe(end: InstanceEnd) -> str:
    if end.how == "lost":
        return "lost its wrapper (the connection closed without an exit status)"
    if end.how == "not started" or end.returncode is None:
        return "did not start"
    return describe_exit(end.returncode)


def failure_report(cause: Cause, ends: Dict[int, InstanceEnd],
                   tails: Dict[int, Dict[str, List[str]]], stacks: Dict[int, str],
                   what: str = "job",
                   first_errors: Optional[Dict[int, Optional[str]]] = None,
                   unanswered: Collection[int] = ()) -> str:
    """The report's text: ``tails`` holds each instance's last stderr and stdout lines and
    ``first_errors`` the exception line of each one's first Python traceback; ``what`` failed:
    the job, or one attempt of an elastic job; ``unanswered``: instances asked for their stacks
    that sent none in time."""
    lines = ["", console.line(f"===== {what} failed: root cause ====="),
             console.line(cause.headline)]
    index = cause.instance
    if index is not None:
        who = ends[index].who if index in ends else f"instance {index}"
        stderr, stdout = tails[index]["stderr"], tails[index]["stdout"]
        first_error = (first_errors or {}).get(index)
        if first_error and first_error not in stderr:
            lines.append(console.line(f"{who}'s first error: {first_error}"))
        if stderr:
            lines.append(console.line(f"last {len(stderr)} line(s) of {who}'s stderr:"))
            lines.extend(f"    {line}" for line in stderr)
        elif stdout:
            lines.append(console.line(f"{who} wrote nothing to stderr; last {len(stdout)} "
                                      f"line(s) of its stdout:"))
            lines.extend(f"    {line}" for line in stdout)
        else:
            lines.append(console.line(f"{who} wrote nothing to stderr or stdout."))
    kept_lines = [line for streams in tails.values() for kept in streams.values() for line in kept]
    for errors, hint in HINTS:
        if any(error in line for line in kept_lines for error in errors):
            lines.append(console.line(hint))
    if cause.engine_lines:
        lines.append(console.line("its last line(s):"))
        lines.extend(f"    {line}" for line in cause.engine_lines)
    others = [f"{e.name or e.index}: {describe(e)}"
              + (" (stopped by poprun-lite)" if e.how == "stopped" else "")
              for i, e in sorted(ends.items()) if i != index]
    if others:
        lines.append(console.line(("other instances: " if index is not None else "instances: ")
                                  + "; ".join(others) + "."))
    if stacks:
        lines.append(stacks_report(stacks, ends, unanswered))
    return "\n".join(lines)


def stacks_report(stacks: Dict[int, str], ends: Dict[int, InstanceEnd],
                  unanswered: Collection[int] = ()) -> str:
    """Every instance's stacks, or why there are none: ``unanswered`` were running when asked
    and sent nothing before the collection's deadline."""
    lines = [console.line("===== Python stacks of every instance (all threads) =====")]
    for index in sorted(ends):
        text = stacks.get(index)
        host = ends[index].host
        if text is None and index in unanswered:
            lines.append(console.line(f"{ends[index].who} (host {host}): running when asked, "
                                      f"but its stacks did not arrive in time (its wrapper or "
                                      f"its host did not answer)."))
        elif text is None:
            lines.append(console.line(f"{ends[index].who} (host {host}): not running, no stack."))
        elif not text.strip():
            lines.append(console.line(f"{ends[index].who} (host {host}): no Python stack (not a "
                                      f"Python program, or its interpreter skipped "
                                      f"site-packages)."))
        else:
            lines.append(console.line(f"{ends[index].who} (host {host}):"))
            lines.extend(f"    {line}" for line in text.rstrip("\n").splitlines())
    return "\n".join(lines)
