"""How long TensorFlow's coordination service waits for a silent IPUMultiWorkerStrategy worker.

TensorFlow 2.9+ starts a coordination service with its multi-worker collective strategy; by
default it ends every task of the job once one task has sent no heartbeat for 10 s, which a
worker of a loaded machine can miss (a whole-process stall: swapping, a stopped process, a
starved scheduler). Graphcore's strategy, on TensorFlow 2.6, had no such service. Under
poprun-lite the launcher already ends a job whose instance died or hung (its hang check has
its own bounds and evidence), so there the service waits ``LAUNCHED_HEARTBEAT_S``; a program
started any other way keeps TensorFlow's default.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

from popdist_launcher.wire import contract

LAUNCHED_HEARTBEAT_S = 600


@contextlib.contextmanager
def launcher_heartbeat() -> Iterator[None]:
    """While a strategy starts up: the coordination service it configures (if any) waits
    ``LAUNCHED_HEARTBEAT_S`` for a task's heartbeat when poprun-lite started the job."""
    if not os.environ.get(contract.JOB_ID):
        yield
        return
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.configure_coordination_service = functools.partial(
        ctx.configure_coordination_service, heartbeat_timeout_in_ms=LAUNCHED_HEARTBEAT_S * 1000)
    try:
        yield
    finally:
        del ctx.configure_coordination_service  # the class's own method again
