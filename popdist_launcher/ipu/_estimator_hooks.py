"""The IPUEstimator's own session-run hooks: the global step reported to poprun-lite after
every run, and stopping after a number of steps read from the global step itself."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.stack_dump import report_progress


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Reports the global step to poprun-lite after every run (popdist_launcher.report_progress:
    elastic jobs tell progress from it)."""

    def begin(self) -> None:
        self._global_step = tf.compat.v1.train.get_global_step().read_value()

    def after_run(self, run_context, run_values) -> None:
        # read after the run (a fetch of the run may see the step before the loop's update)
        report_progress(int(run_context.session.run(self._global_step)))


class StopAtStepHook(tf.compat.v1.train.SessionRunHook):
    """Stops after ``steps`` more steps or at ``last_step``, reading the global step itself."""

    def __init__(self, steps: Optional[int], last_step: Optional[int]) -> None:
        self._steps, self._last_step = steps, last_step

    def begin(self) -> None:
        self._global_step = tf.compat.v1.train.get_global_step().read_value()

    def after_create_session(self, session, coord) -> None:
        if self._steps is not None:
            self._last_step = int(session.run(self._global_step)) + self._steps

    def after_run(self, run_context, run_values) -> None:
        # Read after the run, never as a fetch of it: a fetch may see the step before or after
        # the loop's update, and instances that stop on different steps wait for each other.
        if int(run_context.session.run(self._global_step)) >= self._last_step:
            run_context.request_stop()
