"""Horovod elastic workers started by poprun-lite: a collective that fails during a reset's state
sync raises HorovodInternalError, as it does in the training function, so a survivor restores its
last commit and joins the next round instead of exiting (Horovod converts the error only around
the training function, not around ``state.sync()``); and every ``state.commit()`` is reported to
the launcher as progress (``popdist_launcher.report_progress``: the commits so far)."""
from __future__ import annotations

import functools

from popdist_launcher.compat import horovod_seams

HOROVOD_OPS = ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast")


def install(module) -> None:
    """Hook on ``horovod.tensorflow.elastic``'s import: its two states' ``sync`` converts, and
    ``State.commit`` reports."""
    for state in (module.TensorFlowKerasState, module.TensorFlowState):
        if not getattr(state.sync, "converts_horovod_errors", False):
            state.sync = _converting(state.sync)
    from horovod.common.elastic import State
    if not getattr(State.commit, "reports_progress", False):
        commit = horovod_seams.commit_with(_report_commit)
        commit.reports_progress = True
        State.commit = commit


def _report_commit() -> None:
    """One more ``state.commit()``: the commits so far, reported to the launcher as progress."""
    from popdist_launcher.stack_dump import report_progress

    _commits[0] += 1
    report_progress(_commits[0])


_commits = [0]


def _converting(sync):
    from horovod.common.exceptions import HorovodInternalError
    from tensorflow.python.framework.errors_impl import UnknownError

    @functools.wraps(sync)
    def converting_sync(self):
        try:
            return sync(self)
        except UnknownError as exc:
            if any(op in exc.message for op in HOROVOD_OPS):
                raise HorovodInternalError(exc) from exc
            raise

    converting_sync.converts_horovod_errors = True
    return converting_sync
