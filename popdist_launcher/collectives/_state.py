"""Process-wide collectives state: Horovod start and stop, identity, the stall watchdog."""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import subprocess
import sys
import threading
from typing import Any, Dict, Optional, Tuple

import horovod.tensorflow as hvd
import tensorflow as tf

from popdist_launcher.collectives import _bootstrap
from popdist_launcher.collectives._watchdog import ProbeRegistry, StallWatchdog

log = logging.getLogger(__name__)

STALL_TIMEOUT_ENV = "POPRUN_COLLECTIVES_STALL_TIMEOUT"
DEFAULT_STALL_TIMEOUT = 300.0

NOT_INITIALIZED = (
    "popdist_launcher.collectives is not initialized: call popdist_launcher.collectives.init() "
    "first (once per process, before any collective, size() or rank()).")

_TF_DIR = os.path.dirname(os.path.abspath(tf.__file__))


@dataclasses.dataclass
class State:
    initialized: bool = False
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    watchdog: Optional[StallWatchdog] = None
    failure: Optional[str] = None  # the stall message once the watchdog shut Horovod down
    # Instance 0's Horovod rendezvous when a foreign launcher started the job (see _bootstrap);
    # it ends when this process exits (its stdin, held here, closes).
    rendezvous_server: Optional[subprocess.Popen] = None
    # Horovod process sets registered by register_group(), by their sorted instance indices.
    groups: Dict[Tuple[int, ...], Any] = dataclasses.field(default_factory=dict)


_state = State()
# Held while the state changes (an RLock: register_group runs a collective while it holds it).
lock = threading.RLock()
# The progress counters of the collectives traced into tf.functions (see _tracking.tracked).
PROBES = ProbeRegistry()

# How long process exit (and shutdown()) wait for the watchdog to finish shutting Horovod down.
# Horovod's own exit handler joins the same thread, and two concurrent joins never return.
STOP_WAIT_SECONDS = 60.0


def resolve_stall_timeout(stall_timeout: Optional[float]) -> float:
    """The argument if given, else $POPRUN_COLLECTIVES_STALL_TIMEOUT, else the default (300 s)."""
    source = "stall_timeout"
    value = stall_timeout
    if value is None:
        raw = os.environ.get(STALL_TIMEOUT_ENV, "").strip()
        if not raw:
            return DEFAULT_STALL_TIMEOUT
        source = STALL_TIMEOUT_ENV
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{STALL_TIMEOUT_ENV}={raw!r} is not a number of seconds; set it to "
                             f"e.g. 120, or 0 to disable the stall check.") from None
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a number of seconds, got {value!r}.") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{source} must be 0 (no stall check) or a positive, finite number of "
                         f"seconds, got {value!r}.")
    return value


def _thread_in_tensorflow() -> bool:
    """Whether some other Python thread is inside TensorFlow (e.g. blocked in Session.run)."""
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():  # noqa: SLF001 (documented CPython API)
        if ident != me and frame.f_code.co_filename.startswith(_TF_DIR):
            return True
    return False


def _stop_after_stall(message: str) -> None:
    # No lock here: shutdown() may hold it while waiting for this to return.
    _state.failure = message
    # Every pending Horovod op then fails ("Horovod has been shut down"), here and, through
    # Horovod's shutdown handshake, on every instance still running.
    hvd.shutdown()


def wait_for_stall_shutdown() -> None:
    """Block until a watchdog-triggered Horovod shutdown is complete (bounded)."""
    wd = _state.watchdog
    if wd is not None and not wd.wait_stopped(STOP_WAIT_SECONDS):
        log.error("Horovod did not shut down within %g s after the collective stall; exiting.",
                  STOP_WAIT_SECONDS)
        logging.shutdown()
        os._exit(1)  # the alternative is to hang in Horovod's exit handler


def _configure_watchdog(timeout: float) -> None:
    wd = _state.watchdog
    if timeout <= 0:
        if wd is not None:
            wd.stop()
            _state.watchdog = None
        return
    if wd is not None:
        wd.timeout = timeout
        return
    _state.watchdog = StallWatchdog(
        timeout, _stop_after_stall, where=f" on instance {_state.rank} of {_state.size}",
        graph_running=_thread_in_tensorflow, probes=PROBES)
    _state.watchdog.start()


def init(stall_timeout: Optional[float] = None) -> None:
    """Start Horovod for this instance (idempotent) and arm the stall watchdog.

    ``stall_timeout`` bounds how long a collective may wait for the other instances: when a
    collective is pending and none has completed on this instance for that many seconds, the
    watchdog logs an error naming the pending collectives and shuts Horovod down, so the pending
    call fails (eager mode: ``tf.errors.DeadlineExceededError`` naming the tensor; tf.function /
    Session: the Horovod op's error) and the launcher ends the job instead of hanging. ``None``
    reads $POPRUN_COLLECTIVES_STALL_TIMEOUT, default 300 s; 0 disables the check. Horovod's own
    stall check (HOROVOD_STALL_CHECK_TIME_SECONDS / HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) never
    fires with Horovod 0.28.1 over Gloo, hence this watchdog. Shape and dtype mismatches need no
    timeout: Horovod reports them at once on every instance. A later call only changes the
    timeout when one is given.

    Started without poprun-lite, Horovod is wired from the launcher's variables: MPI under Open
    MPI's mpirun, a Gloo rendezvous served by instance 0 under torchrun, a TF_CONFIG, PMI or
    srun (see ``_bootstrap``).
    """
    with lock:
        if _state.failure is not None:
            raise tf.errors.UnavailableError(None, None, _after_stall_message())
        if _state.initialized:
            if stall_timeout is not None:
                _configure_watchdog(resolve_stall_timeout(stall_timeout))
            return
        timeout = resolve_stall_timeout(stall_timeout)
        server = _bootstrap.prepare(os.environ)
        if server is not None:
            _state.rendezvous_server = server
        # Dynamic process sets let register_group() add a barrier among a subset of instances
        # later (PopDist's execute_on_instances); Horovod's elastic mode keeps its own sets.
        hvd.init(process_sets=None if os.environ.get("HOROVOD_ELASTIC") == "1" else "dynamic")
        # Registered after hvd.init() registers Horovod's, so it runs first at exit.
        atexit.unregister(wait_for_stall_shutdown)
        atexit.register(wait_for_stall_shutdown)
        _state.rank, _state.size = hvd.rank(), hvd.size()
        _state.local_rank, _state.local_size = hvd.local_rank(), hvd.local_size()
        _state.initialized = True
        _configure_watchdog(timeout)
        log.debug("collectives: instance %d of %d (local %d of %d), stall timeout %s",
                  _state.rank, _state.size, _state.local_rank, _state.local_size,
                  f"{timeout:g} s" if timeout > 0 else "off")


def shutdown() -> None:
    """Stop the watchdog and Horovod; a no-op when not initialized."""
    wait_for_stall_shutdown()
    with lock:
        if _state.watchdog is not None:
            _state.watchdog.stop()
            _state.watchdog = None
        was_running = _state.initialized and _state.failure is None
        _state.initialized = False
        _state.groups.clear()
        _state.failure = None
    if was_running:
        hvd.shutdown()


def is_initialized() -> bool:
    """True between init() and shutdown(), unless the watchdog shut Horovod down after a stall."""
    return _state.initialized and _state.failure is None


def _after_stall_message() -> str:
    return (f"popdist_launcher.collectives shut Horovod down after a stall and cannot run more "
            f"collectives in this process: {_state.failure}")


def require(collective: bool = True) -> State:
    """The state, or the error that says why collectives cannot run."""
    if not _state.initialized:
        raise ValueError(NOT_INITIALIZED)
    if collective and _state.failure is not None:
        raise tf.errors.UnavailableError(None, None, _after_stall_message())
    return _state


def group(key: Tuple[int, ...]) -> Any:
    """The Horovod process set registered for ``key`` by register_group()."""
    return require().groups[key]


def current() -> State:
    """The state as it is, initialized or not (the error paths read it)."""
    return _state


def current_watchdog() -> Optional[StallWatchdog]:
    return _state.watchdog
