"""Where an instance is, for poprun-lite's hang check: a thread samples the program's Python
stacks every second and tells the launcher, only when the answer changes, whether the program
waits in a collective (which one), runs TensorFlow, is in a marked long phase, or runs its own
code; and ``long_phase``, the context manager that marks a long phase.

The answer is read from the stacks, so no program is edited: a frame of one of Horovod's
Python collective functions (``hvd.allreduce``, ``allgather``, ``broadcast``,
``broadcast_object``, ``broadcast_variables``, ``join``, ``barrier``, the elastic state sync) or
of ours is "collective NAME" (the innermost one names it); a thread whose innermost frame is in
TensorFlow, Keras, Horovod or this library, or in an import, runs TensorFlow ("tensorflow": a
graph step, where a graph collective waits unseen, or the library's own long operations such as
a checkpoint save, an evaluation or an export), told apart by the CPU its TensorFlow threads
used in the last second: "computing" when they use BUSY of a core (3 %), else "tensorflow";
anything else is the
program's own code ("program": a busy loop, a lock, a blocked read). The main thread decides;
when it waits for another thread to end (training in a thread), the other threads do.

Standard library only: it starts in every program poprun-lite's wrapper starts.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

SAMPLE_S = 1.0
WHERE = b"\0where "
# Horovod's Python collective functions (horovod/tensorflow, horovod/_keras, horovod/common)
HOROVOD_COLLECTIVES = frozenset((
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_",
    "alltoall", "reducescatter", "grouped_reducescatter", "join", "barrier", "broadcast_object",
    "allgather_object", "broadcast_variables", "broadcast_global_variables", "sync"))
# popdist_launcher.collectives' public collectives
OUR_COLLECTIVES = frozenset((
    "allreduce", "allgather", "broadcast", "broadcast_variables", "barrier", "alltoall",
    "reducescatter", "grouped_allreduce", "broadcast_object", "allgather_object"))
LIBRARIES = ("tensorflow", "keras", "tf_keras", "horovod", "tensorflow_estimator",
             "tensorflow_probability")
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep

_phases: "dict[int, str]" = {}  # id -> the name of a long phase now running
_phase_ids = iter(range(1, 1 << 62))
_lock = threading.Lock()


@contextlib.contextmanager
def long_phase(name: str):
    """Mark a phase of this instance as long on purpose (a Python-side evaluation, a slow
    export): while it runs, poprun-lite's hang check calls no instance of the job hung (its
    peers may wait in their next collective meanwhile). Nests; does nothing outside
    poprun-lite. ``with popdist_launcher.long_phase("evaluation"): ...``"""
    with _lock:
        key = next(_phase_ids)
        _phases[key] = str(name).replace("\n", " ")[:200] or "long phase"
    try:
        yield
    finally:
        with _lock:
            _phases.pop(key, None)


def _library_dirs() -> "tuple[str, ...]":
    dirs = [_HERE]
    for name in LIBRARIES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else None
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(dirs)


def _collective(frame, horovod: str) -> "str | None":
    """The innermost collective on ``frame``'s stack, as "outer > inner" names; None if none."""
    names = []
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if horovod and path.startswith(horovod) and code.co_name in HOROVOD_COLLECTIVES:
            names.append(code.co_name)
        elif path.startswith(_HERE + "collectives") and code.co_name in OUR_COLLECTIVES:
            names.append(code.co_name)
        frame = frame.f_back
    return " > ".join(reversed(names[:3])) if names else None


def classify(frame, libraries: "tuple[str, ...]", horovod: str) -> str:
    """One thread's position: "collective NAME", "tensorflow" or "program"."""
    if frame is None:
        return "program"
    named = _collective(frame, horovod)
    if named:
        return f"collective {named}"
    path = frame.f_code.co_filename
    if path.startswith("<frozen ") or \
            (path.startswith(libraries) and not path.startswith(_HERE + "whereabouts")):
        return "tensorflow"  # or an import, or a library's own code
    return "program"


RANK = {"program": 0, "tensorflow": 1, "collective": 2}


def position(frames: dict, main_id: int, skip: "set[int]") -> str:
    """The instance's position from every thread's innermost frame (``sys._current_frames()``)."""
    with _lock:
        phases = list(_phases.values())
    if phases:
        return f"long {phases[-1]}"
    libraries = _library_dirs()
    horovod = next((d for d in libraries if d.endswith(os.sep + "horovod" + os.sep)), "")
    main = frames.get(main_id)
    where = classify(main, libraries, horovod)
    if where == "program" and main is not None and \
            main.f_code.co_filename == threading.__file__:  # waits for a thread (or a lock)
        others = [classify(f, libraries, horovod) for i, f in frames.items()
                  if i != main_id and i not in skip]
        for other in others:
            if RANK[other.split(" ", 1)[0]] > RANK[where.split(" ", 1)[0]]:
                where = other
    return where


def _rank() -> int:
    """This process's Horovod rank, -1 before hvd.init() (or without Horovod)."""
    for name in ("horovod.tensorflow", "horovod.common.basics"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "rank"):
            try:
                return int(module.rank())
            except Exception:
                return -1
    return -1


def _compute_ticks() -> int:
    """CPU ticks so far of the threads that run TensorFlow's work: its own (named tf_...) and
    the main thread (eager ops); not Horovod's background thread, which polls while it waits."""
    total = 0
    main = str(os.getpid())
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.find(b"(") + 1:text.rfind(b")")]
        if tid == main or name.startswith(b"tf_"):
            fields = text[text.rfind(b")") + 2:].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


BUSY = 0.03  # a TensorFlow step whose threads used this much of a core in a sample computes
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Sampler:
    """The thread: every SAMPLE_S, the position; sent when it changed ("LEFT RANK POSITION"),
    with the number of times the program left a wait (collective or TensorFlow) so far and
    its Horovod rank."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.left = 0
        self.last = ""
        self.rank = -1
        self.main_id = threading.main_thread().ident
        self.ticks: "tuple[float, int] | None" = None  # (when, TensorFlow's CPU ticks then)
        self.thread = threading.Thread(target=self.run, name="poprun-whereabouts", daemon=True)

    def sample(self) -> None:
        frames = sys._current_frames()
        skip = {threading.get_ident()}
        skip.update(t.ident for t in threading.enumerate()
                    if t.daemon and t.name.startswith(("poprun-", "collectives-stall")))
        where = position(frames, self.main_id, skip)
        del frames
        if where == "tensorflow":  # waiting in a graph collective, or computing?
            now, ticks = time.monotonic(), _compute_ticks()
            if self.ticks is not None and \
                    ticks - self.ticks[1] >= BUSY * _TICK * (now - self.ticks[0]):
                where = "computing"
            self.ticks = (now, ticks)
        else:
            self.ticks = None
        rank = _rank()
        if (where, rank) == (self.last, self.rank):
            return
        self.rank = rank
        if self.last.startswith(("collective", "tensorflow", "computing")) and \
                not where.startswith(("tensorflow", "computing")):
            self.left += 1
        self.last = where
        message = f"{self.left} {rank} {where}".replace("\n", " ").replace("\0", " ")
        try:
            os.write(self.fd, WHERE + message.encode("utf-8", "replace")[:500] + b"\n")
        except OSError:
            raise SystemExit from None  # the wrapper is gone

    def run(self) -> None:
        while True:
            time.sleep(SAMPLE_S)
            try:
                self.sample()
            except SystemExit:
                return
            except Exception:  # never the program's problem
                pass


def start(fd: int) -> None:
    """Start sampling, reporting on the wrapper's pipe ``fd``."""
    Sampler(fd).thread.start()
