"""Where an instance is and what it does, for poprun-lite's hang check: a thread samples the
program's Python stacks every second and tells the launcher, only when the answer changes, its
position (whether the main thread waits in a collective, which one; runs TensorFlow; is in a
marked long phase; runs its own code; or waits for a thread at interpreter exit) and its
activity (what the program's own threads did since the last look); and ``long_phase``, the
context manager that marks a long phase.

Position, read from the stacks, so no program is edited: a frame of one of Horovod's Python
collective functions (``hvd.allreduce``, ``allgather``, ``broadcast``, ``broadcast_object``,
``broadcast_variables``, ``join``, ``barrier``, the elastic state sync) or of ours is
"collective NAME" (the innermost one names it); a thread whose innermost frame is in
TensorFlow, Keras, Horovod or this library, or in an import, runs TensorFlow ("tensorflow": a
graph step, where a graph collective waits unseen, or the library's own long operations such as
a checkpoint save, an evaluation or an export), told apart by the CPU its TensorFlow threads
used in the last second: "computing" when they use BUSY of a core (3 %), else "tensorflow";
anything else is the program's own code ("program"). The main thread decides; when it waits
for another thread to end (training in a thread), the other threads do.

Activity (``Activity``), from every thread that runs the program's own code (its innermost
frame outside the standard library and the libraries above, a generator that ``tf.data`` runs
included), its CPU time and characters read and written (``/proc/self/task``) and whether its
stack moved: "busy", "sleeping" (in ``time.sleep``: a choice), "blocked" (a lock, a read, a
queue: a wait only another process may end) or "waiting" (no such thread).

Standard library only, besides the report's and the pipe's spelling (``wire/position_report.py``,
``wire/stack_pipe.py``, which import nothing): it starts in every program poprun-lite's wrapper
starts.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from popdist_launcher.wire.position_report import encode
from popdist_launcher.wire.stack_pipe import WHERE

SAMPLE_S = 1.0
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


class _LongPhase:
    """What ``long_phase(name)`` gives: a context manager (re-entrant, nesting) and, as
    contextlib's were, a decorator that runs each call of a function inside the phase."""

    __slots__ = ("name", "_keys")

    def __init__(self, name: str) -> None:
        self.name = str(name).replace("\n", " ")[:200] or "long phase"
        self._keys: "list[int]" = []

    def __enter__(self) -> None:
        with _lock:
            key = next(_phase_ids)
            _phases[key] = self.name
        self._keys.append(key)

    def __exit__(self, *exc_info) -> bool:
        key = self._keys.pop()
        with _lock:
            _phases.pop(key, None)
        return False

    def __call__(self, function):
        import functools  # only for the decorator: the sampler starts in every program

        @functools.wraps(function)
        def in_phase(*args, **kwargs):
            with _LongPhase(self.name):
                return function(*args, **kwargs)
        return in_phase


def long_phase(name: str) -> _LongPhase:
    """Mark a phase of this instance as long on purpose (a Python-side evaluation, a slow
    export): while it runs, poprun-lite's hang check calls no instance of the job hung (its
    peers may wait in their next collective meanwhile). Nests; does nothing outside
    poprun-lite. ``with popdist_launcher.long_phase("evaluation"): ...``, or as a decorator."""
    return _LongPhase(name)


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


def _importing(frame, libraries: "tuple[str, ...]") -> bool:
    """Whether ``frame``'s thread runs an import: walking out, importlib's machinery comes
    before any frame of the program's own files (a module's top-level code, a library loading
    its parts or an extension being loaded)."""
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith("<frozen importlib"):
            return True
        if not path.startswith(libraries) and _programs_file(path):
            return False
        frame = frame.f_back
    return False


def _programs_file(path: str) -> bool:
    """Whether ``path`` is one of the program's own files, not the standard library's, frozen
    or an installed package's (the libraries of LIBRARIES are told apart by the callers)."""
    return not (path.startswith(_STDLIB) or path.startswith("<") or
                any(part in path for part in _PACKAGES))


def classify(frame, libraries: "tuple[str, ...]", horovod: str) -> str:
    """One thread's position: "collective NAME", "import", "tensorflow" or "program"."""
    if frame is None:
        return "program"
    named = _collective(frame, horovod)
    if named:
        return f"collective {named}"
    if _importing(frame, libraries):
        return "import"  # loading modules: work, not a wait
    path = frame.f_code.co_filename
    if path.startswith("<frozen ") or \
            (path.startswith(libraries) and not path.startswith(_HERE + "whereabouts")):
        return "tensorflow"  # or an import, or a library's own code
    return "program"


RANK = {"program": 0, "import": 0, "tensorflow": 1, "collective": 2}


def position(frames: dict, main_id: int, skip: "set[int]") -> str:
    """The instance's position from every thread's innermost frame (``sys._current_frames()``)."""
    with _lock:
        phases = list(_phases.values())
    if phases:
        return f"long {phases[-1]}"
    libraries = _library_dirs()
    horovod = next((d for d in libraries if d.endswith(os.sep + "horovod" + os.sep)), "")
    main = frames.get(main_id)
    if main is not None and main.f_code.co_filename == threading.__file__ and \
            main.f_code.co_name == "_shutdown":
        return "exit"  # the interpreter waits for a thread before it exits
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


# ---- what the program's threads do: the evidence for a hang's kind ---------------------------
# Linux system calls a thread sleeps in by choice (time.sleep), per machine
SLEEP_CALLS = {"x86_64": {35, 230}, "aarch64": {101, 115}, "ppc64le": {162, 371}}
_SLEEPS = SLEEP_CALLS.get(os.uname().machine if hasattr(os, "uname") else "", set())
_STDLIB = tuple(p + os.sep for p in {os.path.dirname(os.__file__),
                                    os.path.dirname(threading.__file__)})


def _task(tid: int, more: bool = True) -> "tuple[int, int, str, str]":
    """(CPU ticks, characters read and written, state letter, system call) of thread ``tid``
    of this process; system call "" when unknown, "running" when it runs; without ``more``,
    its CPU ticks and state only."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as stat:
            text = stat.read()
        fields = text[text.rfind(b")") + 2:].split()
        ticks, state = int(fields[11]) + int(fields[12]), fields[0].decode()
    except (OSError, ValueError, IndexError):
        return 0, 0, "", ""
    if not more:
        return ticks, 0, state, ""
    chars = 0
    try:
        with open(f"/proc/self/task/{tid}/io", "rb") as io:
            for line in io.read().splitlines()[:2]:  # rchar, wchar
                chars += int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/self/task/{tid}/syscall", "rb") as call:
            first = call.read().split(b" ", 1)[0].strip()
    except OSError:
        first = b""
    return ticks, chars, state, first.decode("ascii", "replace")


def _own_frame(frame, libraries: "tuple[str, ...]"):
    """The innermost frame of ``frame``'s stack in the program's own code: outside the
    standard library and the libraries above, and reached, walking out, from the program's own
    files before any library (NumPy called by the program is its own code; a package that
    TensorFlow calls is not). None when the thread runs none (an idle pool thread, a library's
    thread), is inside a library the program called, or waits for another of its threads
    (``Thread.join``)."""
    innermost = None
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if path.startswith(libraries):
            return None
        if path == threading.__file__ and code.co_name in ("join", "_shutdown"):
            return None
        if not (path.startswith(_STDLIB) or path.startswith("<")):
            innermost = innermost or frame
            if _programs_file(path):
                return innermost
        frame = frame.f_back
    return innermost


_PACKAGES = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _place(frame) -> str:
    """ "gen at prog.py:41" for a frame."""
    code = frame.f_code
    return f"{code.co_name} at {os.path.basename(code.co_filename)}:{frame.f_lineno}"


class Activity:
    """What the program's own threads did since the last look: "busy" (CPU, I/O or a moving
    stack), "sleeping" (one sleeps by choice: time.sleep), "blocked" (all wait without CPU or
    I/O: a lock, a read, a queue, a generator's wait) or "waiting" (no thread runs the program's
    own code: it waits inside TensorFlow or Horovod); and where."""

    def __init__(self) -> None:
        self.seen: "dict[int, tuple]" = {}  # thread ident -> (frame key, ticks, chars)
        self.pool_ticks: "int | None" = None  # TensorFlow's threads' CPU, when one runs Python
        self.pool_busy = False  # their CPU went to the program's Python (a py_function)

    def look(self, frames: dict, skip: "set[int]", main_id: int,
             libraries: "tuple[str, ...]", threads: "dict | None" = None) -> "tuple[str, str]":
        """(activity, where: "main thread in gen at prog.py:41") from every thread's stack
        (``sys._current_frames()``), the Python threads (ident -> Thread; all by default) and
        this process's /proc entries."""
        if threads is None:
            threads = {t.ident: t for t in threading.enumerate()}
        own = {}
        for ident, frame in frames.items():
            found = _own_frame(frame, libraries) if ident not in skip else None
            if found is not None:
                own[ident] = found
        seen, busy, sleeping, blocked = {}, [], [], []
        needed = BUSY * _TICK * SAMPLE_S
        for ident, frame in own.items():
            thread = threads.get(ident)
            who = "main thread" if ident == main_id else \
                f"thread {thread.name}" if thread is not None else "a TensorFlow thread"
            where = f"{who} in {_place(frame)}"
            key = (id(frame.f_code), frame.f_lineno, frame.f_lasti)
            if thread is None or not thread.native_id:  # Python that TensorFlow runs
                seen[ident] = (key, 0, 0)
                before = self.seen.get(ident)
                if before is None or before[0] != key:
                    busy.append(where)
                blocked.append(where)
                continue
            ticks, chars, state, call = _task(thread.native_id)
            seen[ident] = (key, ticks, chars)
            before = self.seen.get(ident)
            if before is None or before[0] != key or ticks - before[1] >= needed or \
                    chars > before[2] or state == "R":
                busy.append(where)
            elif call.isdigit() and int(call) in _SLEEPS:
                sleeping.append(where)
            else:
                blocked.append(where)
        pool = any(i not in threads for i in own)
        self.pool_busy = False
        if pool:  # TensorFlow's threads run the program's Python: their CPU, or one sleeps
            ticks, sleeps = _tensorflow_threads(calls=True)
            if self.pool_ticks is not None and ticks - self.pool_ticks >= needed:
                self.pool_busy = True
                busy.append(next(w for w in blocked if w.startswith("a TensorFlow thread")))
            if sleeps:
                sleeping.append("a TensorFlow thread running the program's code")
            self.pool_ticks = ticks
        else:
            self.pool_ticks = None
        self.seen = seen
        if not own:
            return "waiting", ""
        if busy:
            return "busy", busy[0]
        if sleeping:
            return "sleeping", sleeping[0]
        return "blocked", blocked[0]


def _tensorflow_threads(calls: bool = False) -> "tuple[int, bool]":
    """TensorFlow's own threads (named tf_...): their CPU ticks so far, and (``calls``) whether
    one of them sleeps (time.sleep in Python that TensorFlow runs: a generator, a py_function).
    Not Horovod's background thread, which polls while it waits."""
    total, sleeps = 0, False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0, False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as comm:
                if not comm.read().startswith(b"tf_"):
                    continue
        except OSError:
            continue
        ticks, _, _, call = _task(int(tid), calls)
        total += ticks
        sleeps = sleeps or (call.isdigit() and int(call) in _SLEEPS)
    return total, sleeps


def _compute_ticks() -> int:
    """CPU ticks so far of the threads that run TensorFlow's work: its own and the main
    thread (eager ops)."""
    return _tensorflow_threads()[0] + _task(os.getpid(), False)[0]


BUSY_DETAIL_S = 10.0  # a busy thread's place is sent again at most this often
BUSY = 0.03  # threads that used this much of a core in a sample compute
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Sampler:
    """The thread: every SAMPLE_S, the position and the activity; sent when either changed,
    with the number of times the program left a wait (collective or TensorFlow) so far and
    its Horovod rank (``encode``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.left = 0
        self.last: "tuple" = ("", "", -1, "")
        self.detail, self.sent = "", 0.0
        self.main_id = threading.main_thread().ident
        # (when, TensorFlow's CPU ticks then) at the last look inside a TensorFlow step
        self.ticks: "tuple[float, int] | None" = None
        self.activity = Activity()
        self.thread = threading.Thread(target=self.run, name="poprun-whereabouts", daemon=True)

    def sample(self) -> None:
        frames = sys._current_frames()
        threads = {t.ident: t for t in threading.enumerate()}
        skip = {threading.get_ident()}
        skip.update(i for i, t in threads.items()
                    if t.daemon and t.name.startswith(("poprun-", "collectives-stall")))
        where = position(frames, self.main_id, skip)
        activity, detail = self.activity.look(frames, skip, self.main_id, _library_dirs(),
                                              threads)
        del frames
        if where == "tensorflow":  # waiting in a graph collective, or computing?
            now, ticks = time.monotonic(), _compute_ticks()
            before, self.ticks = self.ticks, (now, ticks)
            if before is None:
                return  # told at the next sample, when its CPU is known
            # CPU since the last look inside a step (the time between counts: a loop that is in
            # a step at every other look is computing)
            if not self.activity.pool_busy and \
                    ticks - before[1] >= BUSY * _TICK * (now - before[0]):
                where = "computing"  # (CPU that the program's own Python used is not)
        rank = _rank()
        now = time.monotonic()
        key = (where, activity, rank, "" if activity == "busy" else detail)
        if key == self.last and (activity != "busy" or detail == self.detail
                                 or now - self.sent < BUSY_DETAIL_S):
            return
        self.detail, self.sent = detail, now
        before = self.last[0]
        if before != where and before.startswith(("collective", "tensorflow", "computing")) \
                and not where.startswith(("tensorflow", "computing")):
            self.left += 1
        self.last = key
        try:
            os.write(self.fd, WHERE + encode(self.left, rank, activity, where, detail) + b"\n")
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
