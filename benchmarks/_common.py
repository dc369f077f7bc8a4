"""Helpers shared by the benchmark drivers (allreduce.py, training_throughput.py,
estimator_throughput.py, launch_overhead.py).

Finding the launchers, a clean environment for a launch, running a launch and stopping it (only
what it started: its process group and its descendants, by pid), the most telling line of its
log, facts about the machine and the code measured, and writing the report. Where the drivers
differ in a detail, a parameter keeps each driver's own behaviour.

Only the drivers import this module; the workers (``_*_worker.py``), which run inside the
launched instances, do not.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import (IO, Any, Callable, Dict, Iterable, List, Mapping, Optional, Pattern, Sequence,
                    Tuple, Type, Union)

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the repository
BIN = os.path.dirname(sys.executable)  # this interpreter's bin/ (the virtualenv's)
# Launcher variables a parent shell may hold: a launch starts without them (and TF_CONFIG), as
# each launcher sets its own. allreduce.py drops these ...
LAUNCHER_PREFIXES = ("HOROVOD_", "OMPI_", "PMIX_", "PRTE_", "POPDIST_", "POPRUN_")
# ... the training drivers these (PMI_ rather than PMIX_ and PRTE_).
TRAINING_LAUNCHER_PREFIXES = ("POPDIST_", "POPRUN_", "HOROVOD_", "OMPI_", "PMI_")
# What the training drivers take for an error line.
ERROR_WORDS = re.compile(r"Error|error:")
KILL_WAIT_S = 10.0  # how long stop() waits for the launcher once it has been SIGKILLed


# ---- launching ---------------------------------------------------------------------------------
def bin_path(name: str) -> str:
    """``name`` in this interpreter's bin/ directory (whether it is there or not)."""
    return os.path.join(BIN, name)


def tool(name: str, which: bool = True) -> str:
    """The executable ``name`` in this interpreter's bin/ (the virtualenv's) when it is there;
    else the one ``shutil.which`` finds on PATH (the bin/ path if none), or with
    ``which=False`` the bare name, left to the launch's PATH."""
    local = bin_path(name)
    if os.access(local, os.X_OK):
        return local
    return (shutil.which(name) or local) if which else name


def launch_env(drop_prefixes: Tuple[str, ...] = LAUNCHER_PREFIXES,
               keep_tf_log_level: bool = False) -> Dict[str, str]:
    """This process's environment for a launch: without the variables whose names start with one
    of ``drop_prefixes`` and without TF_CONFIG; this interpreter's bin/ first on PATH;
    TF_CPP_MIN_LOG_LEVEL=2 (with ``keep_tf_log_level``, only where it is not set); and
    PYTHONUNBUFFERED=1."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop_prefixes) and k != "TF_CONFIG"}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    if keep_tf_log_level:
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    else:
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_logged(argv: List[str], workdir: str, timeout_s: float, env: Dict[str, str]
               ) -> Tuple[Optional[int], float, int]:
    """Runs a launch in a session of its own, in ``workdir``, its stdout and stderr going to the
    files ``stdout`` and ``stderr`` there, until it exits or ``timeout_s`` passes (then
    :func:`stop`, which raises if the launcher outlives its SIGKILL). Returns the exit code (None
    on timeout), the seconds it ran and its pid, which is also its process group id."""
    exit_on_sigterm()
    started = time.perf_counter()
    with open(os.path.join(workdir, "stdout"), "wb") as out, \
            open(os.path.join(workdir, "stderr"), "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                cwd=workdir, start_new_session=True)
        try:
            rc: Optional[int] = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(proc, wait_raises=True)
            rc = None
        except BaseException:  # Ctrl-C or SIGTERM: the launch in flight is stopped too
            stop(proc)
            raise
    return rc, time.perf_counter() - started, proc.pid


def exit_on_sigterm() -> None:
    """SIGTERM to a driver raises SystemExit (143) in its main thread, so that the launch it is
    waiting for is stopped before it exits instead of being left running."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def launch_error(rc: Optional[int], timeout_s: float, workdir: str, result_path: str
                 ) -> Optional[str]:
    """Why a launch :func:`run_logged` ran failed, followed by the most telling line of its
    stderr (else of its stdout); None if it exited 0 and wrote ``result_path``."""
    if rc is None:
        error = f"timed out after {timeout_s:g} s"
    elif rc != 0:
        error = f"exit status {rc}"
    elif not os.path.exists(result_path):
        error = "instance 0 wrote no result"
    else:
        return None
    detail = (telling_line(os.path.join(workdir, "stderr"), ERROR_WORDS, keep_end=True)
              or telling_line(os.path.join(workdir, "stdout"), ERROR_WORDS, keep_end=True))
    return f"{error}: {detail}" if detail else error


# ---- stopping (only what this benchmark started) -----------------------------------------------
def descendants(pid: int) -> List[psutil.Process]:
    """Every live descendant of process ``pid`` (none if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_group(pgid: int, sig: int,
                 ignore: Tuple[Type[OSError], ...] = (ProcessLookupError,)) -> None:
    """Sends ``sig`` to process group ``pgid`` (one this benchmark created); the errors in
    ``ignore`` (by default: the group is gone) are not raised."""
    try:
        os.killpg(pgid, sig)
    except ignore:
        pass


def kill_each(processes: Iterable[psutil.Process]) -> None:
    """SIGKILLs each process by its pid (psutil makes sure the pid is still that process's); one
    that is gone is skipped."""
    for proc in processes:
        try:
            proc.kill()
        except psutil.Error:
            pass


def wait_quietly(proc: subprocess.Popen, timeout_s: float) -> None:
    """Waits up to ``timeout_s`` for ``proc`` to exit; no error if it has not."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass


def stop(proc: subprocess.Popen, grace_s: float = 10.0, wait_raises: bool = False) -> None:
    """Stops a launch started with ``start_new_session=True`` (its process group id is its pid):
    SIGTERM to the group (launchers pass it on to their instances), up to ``grace_s`` for it to
    exit, then SIGKILL to the group and to every descendant seen before the SIGTERM (instances may
    run in sessions of their own), each by pid; then up to 10 s for the launcher to be reaped
    (with ``wait_raises``, subprocess.TimeoutExpired if it is not)."""
    started = descendants(proc.pid)
    signal_group(proc.pid, signal.SIGTERM)
    wait_quietly(proc, grace_s)
    signal_group(proc.pid, signal.SIGKILL)
    kill_each(started)
    if wait_raises:
        proc.wait(timeout=KILL_WAIT_S)
    else:
        wait_quietly(proc, KILL_WAIT_S)


# ---- logs --------------------------------------------------------------------------------------
def log_text(source: Union[str, IO[bytes]]) -> str:
    """A whole log, from a path ("" if it cannot be read) or from a binary file object (read
    from its start), decoded as UTF-8 with bad bytes replaced."""
    if isinstance(source, str):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError:
            return ""
    else:
        source.seek(0)
        data = source.read()
    return data.decode("utf-8", "replace")


def telling_line(source: Union[str, IO[bytes]], pattern: Optional[Pattern[str]] = None, *,
                 skip_prefix: Optional[str] = None, keep_end: bool = False, limit: int = 500,
                 empty: str = "") -> str:
    """The most telling line of a log (a path or a file object, see :func:`log_text`): the last
    non-blank line that ``pattern`` matches (``search``) and that does not start with
    ``skip_prefix``, else the last non-blank line; stripped and cut to ``limit`` characters (its
    last ones with ``keep_end``, else its first ones); ``empty`` for a log with no such line."""
    lines = [line.strip() for line in log_text(source).splitlines()]
    lines = [line for line in lines if line]

    def cut(line: str) -> str:
        return line[-limit:] if keep_end else line[:limit]

    if pattern is not None:
        for line in reversed(lines):
            if pattern.search(line) and not (skip_prefix and line.startswith(skip_prefix)):
                return cut(line)
    return cut(lines[-1]) if lines else empty


# ---- the machine and the code ------------------------------------------------------------------
def cpu_model(default: str = "") -> str:
    """The CPU's model name from /proc/cpuinfo; ``default`` if it says none or cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), default)
    except OSError:
        return default


def dist_version(*dists: str) -> Optional[str]:
    """The version of the first of the distributions ``dists`` that is installed; None if none."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def git(*argv: str) -> Optional[str]:
    """``git ARGV`` in the repository: its stdout, stripped; None if it fails."""
    try:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_state() -> Dict[str, Any]:
    """The commit checked out, and whether popdist_launcher/ differs from it (None: unknown)."""
    status = git("status", "--porcelain", "--", "popdist_launcher")
    return {"git_commit": git("rev-parse", "HEAD"),
            "popdist_launcher_changed_since_commit": bool(status) if status is not None else None}


ONEDNN_HELP = ("TensorFlow's oneDNN CPU kernels: its default for this CPU, or "
               "TF_ENABLE_ONEDNN_OPTS=1/0 (off: Eigen's kernels, TensorFlow's default on CPUs "
               "without AVX512-VNNI, AVX-VNNI or AMX)")
ONEDNN_CHOICES = ("default", "on", "off")


def with_onednn(env: Dict[str, str], choice: str) -> Dict[str, str]:
    """``env`` with TF_ENABLE_ONEDNN_OPTS set for ``choice`` (one of ONEDNN_CHOICES)."""
    if choice != "default":
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if choice == "on" else "0"
    return env


def cpu_flags() -> List[str]:
    """The CPU features that decide TensorFlow's CPU kernels (vector width, oneDNN's default)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in wanted if flag in flags]


def machine_info(load_before: Sequence[float], extra: Mapping[str, Any]) -> Dict[str, Any]:
    """The training drivers' "machine" entry: platform, CPU, memory and Python, then ``extra``
    (library versions, ...), then the load averages before the run and now."""
    return {
        "platform": platform.platform(),
        "cpu_model": cpu_model(platform.processor()),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2 ** 30, 1),
        "python": platform.python_version(),
        **extra,
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "note": "shared machine: other jobs may run at the same time; compare spreads",
    }


def stack_machine_info(load_before: Sequence[float], onednn: Sequence[str]) -> Dict[str, Any]:
    """:func:`machine_info` for the training drivers: which CPU kernels TensorFlow ran
    (``onednn``, as the workers reported it) and the TensorFlow, Keras 2 and Horovod versions."""
    return machine_info(load_before, {
        "tensorflow_onednn_kernels": list(onednn),
        "tensorflow": dist_version("tensorflow-cpu", "tensorflow"),
        "keras_2": dist_version("tf-keras"), "horovod": dist_version("horovod")})


def loadavg_keys(load_before: Sequence[float]) -> Dict[str, List[float]]:
    """``loadavg_before`` (the given load averages) and ``loadavg_after`` (now), to 0.01."""
    return {"loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


# ---- results and charts ------------------------------------------------------------------------
class LaunchStats:
    """For a dataclass holding the ``launches`` of one configuration (each with an ``ok`` flag):
    a field's values over the launches that succeeded, and their median."""

    launches: List[Any]

    def values(self, key: str) -> List[Any]:
        return [getattr(run, key) for run in self.launches if run.ok]

    def median(self, key: str) -> Optional[float]:
        values = self.values(key)
        return statistics.median(values) if values else None


def subplots(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots`` on the Agg backend (files only), matplotlib being imported
    only when a chart is drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(*args, **kwargs)


def save_figure(fig: Any, path: str, title: Optional[str] = None) -> None:
    """Saves a chart from :func:`subplots` to ``path`` (tight layout, 110 dpi; ``title`` above
    it, if given) and frees it."""
    import matplotlib.pyplot as plt
    if title is not None:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the report --------------------------------------------------------------------------------
def finish(report: Dict[str, Any], out: str, draw: Callable[[str], None],
           show: Callable[[], None], *, final_newline: bool = False,
           wall_s: Optional[float] = None) -> int:
    """The end of a driver's main(): ``report`` as indented JSON to ``out`` (its folder made; a
    final newline with ``final_newline``), ``draw(png)`` for the chart next to it (same name,
    .png), ``show()`` for the tables, then the line naming both files (and ``wall_s``, the run's
    seconds). Returns main()'s exit status, 0."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
        if final_newline:
            f.write("\n")
    png = os.path.splitext(out)[0] + ".png"
    draw(png)
    show()
    print(f"\nwrote {out} and {png}" + (f" ({wall_s:.0f} s)" if wall_s is not None else ""))
    return 0
