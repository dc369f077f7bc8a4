"""``ipu.ipu_session_run_hooks``: IPULoggingTensorHook, logging tensors from inside a training
loop (through an outfeed) every N session runs, every N seconds, or at the end."""
from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from popdist_launcher.ipu import ipu_outfeed_queue

log = logging.getLogger(__name__)


class IPULoggingTensorHook(tf.compat.v1.train.SessionRunHook):
    """``log(tensors)`` inside the loop enqueues them; the hook logs (at INFO, through
    ``logging``) the last values (``LoggingMode.LAST``) or all of them (``LoggingMode.ALL``)."""

    LoggingMode = ipu_outfeed_queue.IPUOutfeedMode

    def __init__(self, every_n_iter: Optional[int] = None, every_n_secs: Optional[float] = None,
                 at_end: bool = False, formatter: Optional[Callable] = None,
                 logging_mode=ipu_outfeed_queue.IPUOutfeedMode.LAST) -> None:
        if every_n_iter is not None and every_n_secs is not None:
            raise ValueError("Cannot provide both every_n_iter and every_n_secs")
        if every_n_iter is None and every_n_secs is None and not at_end:
            raise ValueError("Either every_n_iter, every_n_secs or at_end should be provided")
        self._timer = None if every_n_iter is None and every_n_secs is None else \
            tf.compat.v1.train.SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter)
        self._at_end = at_end
        self._formatter = formatter
        self._outfeed = ipu_outfeed_queue.IPUOutfeedQueue(outfeed_mode=logging_mode)
        self._dequeue = None
        self._iteration = 0

    def log(self, tensors):
        """Enqueue ``tensors`` (a dict of name -> tensor, a list, or one tensor); returns the op
        (keep it in the loop, e.g. with ``tf.group``, so it is not pruned)."""
        if self._outfeed.enqueued:
            raise RuntimeError("Cannot use this hook object's log function more than once. Either "
                               "enqueue all tensors in a single log call using a list or dict, or "
                               "create another hook.")
        if not isinstance(tensors, dict):
            tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
            for t in tensors:
                if not tf.is_tensor(t):
                    raise TypeError(f"Expected `tf.Tensor`, got {type(t)}")
            tensors = {t.name: t for t in tensors}
        return self._outfeed.enqueue(tensors)

    def begin(self) -> None:
        if not self._outfeed.enqueued:
            raise RuntimeError("This logging hook's outfeed was not enqueued. Did you forget to "
                               "call the log function?")
        with tf.device("/device:CPU:0"):
            self._dequeue = self._outfeed.dequeue()
        self._iteration = 0

    def after_run(self, run_context, run_values) -> None:
        if self._timer is not None and self._timer.should_trigger_for_step(self._iteration):
            self._log(run_context.session.run(self._dequeue))
        self._iteration += 1

    def end(self, session) -> None:
        if self._at_end:
            self._log(session.run(self._dequeue))
        if self._timer is not None:
            self._timer.reset()

    def _log(self, values: dict) -> None:
        elapsed = None if self._timer is None else \
            self._timer.update_last_triggered_step(self._iteration)[0]
        with np.printoptions(suppress=True):
            if self._formatter:
                log.info("%s", self._formatter(values))
                return
            stats = ", ".join(f"{k} = {v}" for k, v in values.items())
        if elapsed is not None:
            log.info("%s (%.3f sec)", stats, elapsed)
        else:
            log.info("%s", stats)
