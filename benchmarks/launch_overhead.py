"""Launch overhead of poprun-lite compared with bare spawns, mpirun and horovodrun.

What it measures
----------------
Each launcher starts N (default 4) instances of ``python -c pass`` (this interpreter) on the
local machine, loopback only; with ``--program tensorflow`` each instance imports TensorFlow and
runs one Keras layer instead (the start-up of a real program: what the launcher gives its
instances shows there, e.g. the site hook's frozen import-time objects):

* ``bare``        N x ``subprocess.Popen`` then wait: the floor, no launcher at all;
* ``poprun-lite`` ``poprun-lite -np N python -c pass`` (``--backend B`` when given: its default is
  mpi);
* ``mpirun``      ``mpirun -np N --oversubscribe --allow-run-as-root python -c pass``;
* ``horovodrun``  ``horovodrun -np N --gloo -H localhost:N python -c pass``;
* ``baseline``    with ``--baseline EXE``: EXE in place of poprun-lite, e.g. a script running an
  older checkout, so that before and after are measured in the same rounds.

``--skip NAME`` leaves a launcher out (e.g. horovodrun, for quick runs).

The launchers are looked up next to ``sys.executable`` (the virtualenv's bin/ directory).

For every run it records

* wall time: from just before the first process is started to the moment the launcher (for
  ``bare``: the last of the N processes) has exited and been reaped;
* launcher peak RSS: the largest ``VmHWM`` (the kernel's own resident-set high-water mark) read
  from ``/proc/<launcher>/status`` while the launcher runs. ``bare`` has no launcher process
  (the benchmark's own Python does not count), so this is null for it;
* CPU seconds: user + system time of every process the run started, once all were reaped
  (``RUSAGE_CHILDREN`` before and after; a launcher's instances are reaped by it);
* tree peak RSS: the largest sum of the current RSS of every live descendant of this benchmark
  process (launcher, its helpers/daemons and the N instances) seen at one sampling instant. RSS
  counts shared pages (libpython, shared libraries) once per process, so this over-states real
  memory use, equally for every launcher.

A sampler thread polls every ``--interval-ms`` (default 2 ms) for every launcher alike. It finds
descendants without rescanning the whole process table each time: it remembers every pid that
existed before the run (those can never become our descendants) and only looks up the parent of
pids that are new, so a sample costs a directory listing plus a few small /proc reads. Processes
that are orphaned before the sampler first sees them are missed (as with any ppid-based walk).

Before the runs the launcher's package is byte-compiled: with PYTHONDONTWRITEBYTECODE set (as in
many development shells) a source edited since its last ``.pyc`` would otherwise be compiled
again by every launch, which measures the compiler (up to ~12 ms), not the launcher.

Each launcher gets one uncounted warm-up run. Measured runs are interleaved: every round runs
each launcher once, in an order rotated from round to round, so machine noise is spread over all
launchers. horovodrun takes seconds per run, so it has its own, smaller, repeat count.

Results go to benchmarks/results/launch_overhead.json (``--out``) and a bar chart next to it
(same name, .png); a short table is printed. A launcher that is missing, fails or times out is
recorded with an error (the last line of its stderr) instead of stopping the benchmark.

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/launch_overhead.py``
"""
from __future__ import annotations

import argparse
import compileall
import datetime
import os
import platform
import resource
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (bin_path, finish, kill_each, loadavg_keys, save_figure,  # noqa: E402
                     signal_group, subplots, telling_line, wait_quietly)

MIB = 1024 * 1024
# The issue's targets for poprun-lite.
TARGET_VS_MPIRUN = 3.2          # median wall time at most 3.2x mpirun's (one start path, issue 25)
TARGET_VS_HOROVODRUN = 0.05     # median wall time under 5% of horovodrun's
TARGET_LAUNCHER_BYTES = 40 * 1000 * 1000  # launcher peak RSS under 40 MB (the stricter 10^6 MB)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# What each instance runs (``--program``).
PROGRAMS = {
    "pass": "pass",
    "tensorflow": "import tensorflow as tf; tf.keras.layers.Dense(1)(tf.ones((1, 1)))",
}


@dataclass
class Launcher:
    """One way of starting the instances. ``argv`` is None for bare spawns."""
    name: str
    argv: Optional[List[str]]
    repeats: int
    runs: List["RunResult"] = field(default_factory=list)
    error: Optional[str] = None


@dataclass
class RunResult:
    wall_s: float
    cpu_s: float
    launcher_peak_bytes: Optional[int]
    tree_peak_bytes: int
    samples: int
    sample_cost_s: float
    strays: List[str]  # command lines of descendants still running after the launcher exited


class LaunchFailed(Exception):
    """A launcher could not be started, exited non-zero or timed out."""


class TreeSampler(threading.Thread):
    """Polls the memory of this process's descendants until stopped.

    Construct it before starting anything: the pids alive at that moment are taken as foreign.
    Set ``launcher_pid`` once the launcher is started to also track its own VmHWM.
    """

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="tree-sampler", daemon=True)
        self.interval_s = interval_s
        self.root = os.getpid()
        self.foreign = set(psutil.pids())
        self.tree: Dict[int, psutil.Process] = {}
        self.launcher_pid: Optional[int] = None
        self.launcher_hwm = 0
        self.tree_peak = 0
        self.samples = 0
        self.sample_cost_s = 0.0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            started = time.perf_counter()
            self._sample()
            self.sample_cost_s += time.perf_counter() - started
            self.samples += 1
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def _discover(self) -> None:
        """Adds new pids whose parent is this process or a tree member; the rest are foreign."""
        known = set(self.tree)
        pending: Dict[int, psutil.Process] = {}
        parents: Dict[int, int] = {}
        for pid in psutil.pids():
            if pid in self.foreign or pid in known:
                continue
            try:
                proc = psutil.Process(pid)
                parents[pid] = proc.ppid()
                pending[pid] = proc
            except psutil.Error:  # already gone
                self.foreign.add(pid)
        # A new child can be listed before its (also new) parent: repeat until nothing joins.
        grew = True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if pid not in self.tree and (ppid == self.root or ppid in self.tree):
                    self.tree[pid] = pending[pid]
                    grew = True
        self.foreign.update(pid for pid in pending if pid not in self.tree)

    def _sample(self) -> None:
        self._discover()
        total = 0
        for proc in self.tree.values():
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # exited since discovery
                pass
        self.tree_peak = max(self.tree_peak, total)
        if self.launcher_pid is not None:
            self.launcher_hwm = max(self.launcher_hwm, read_vmhwm(self.launcher_pid))

    def alive(self) -> List[psutil.Process]:
        """Tree members still running (after stop())."""
        return [proc for proc in self.tree.values() if _is_alive(proc)]


def _is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        return f"pid {proc.pid}"


def read_vmhwm(pid: int) -> int:
    """The process's peak RSS so far in bytes, or 0 if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def wait_exit(proc: subprocess.Popen, deadline: float) -> int:
    """Waits for the process to exit, by its pidfd, until the perf_counter() deadline.

    Popen.wait(timeout=...) polls with sleeps of up to 50 ms, which would quantize the wall
    times; a pidfd becomes readable the moment the process exits.
    """
    pidfd = os.pidfd_open(proc.pid)
    try:
        readable, _, _ = select.select([pidfd], [], [], max(0.0, deadline - time.perf_counter()))
    finally:
        os.close(pidfd)
    if not readable:
        raise subprocess.TimeoutExpired(proc.args, deadline)
    return proc.wait()


def kill_started(procs: Sequence[subprocess.Popen], sampler: TreeSampler) -> None:
    """SIGKILLs what this benchmark started: each Popen's process group, then known descendants."""
    for proc in procs:  # start_new_session: pgid == pid
        signal_group(proc.pid, signal.SIGKILL, ignore=(ProcessLookupError, PermissionError))
    kill_each(sampler.alive())
    for proc in procs:
        wait_quietly(proc, 10)


def run_once(launcher: Launcher, program: List[str], np_: int, timeout_s: float,
             interval_s: float) -> RunResult:
    """Runs the launcher once while sampling; raises LaunchFailed with its stderr's last line."""
    sampler = TreeSampler(interval_s)
    sampler.start()
    procs: List[subprocess.Popen] = []
    with tempfile.TemporaryFile() as stderr:
        def spawn(argv: List[str]) -> subprocess.Popen:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=stderr, start_new_session=True)

        cpu_before = _children_cpu_s()
        started = time.perf_counter()
        try:
            if launcher.argv is None:
                for _ in range(np_):
                    procs.append(spawn(program))
            else:
                procs.append(spawn(launcher.argv))
                sampler.launcher_pid = procs[0].pid
            codes = [wait_exit(proc, started + timeout_s) for proc in procs]
            wall = time.perf_counter() - started
        except subprocess.TimeoutExpired:
            sampler.stop()
            kill_started(procs, sampler)
            raise LaunchFailed(f"timed out after {timeout_s:g} s; last stderr line: "
                               f"{telling_line(stderr, empty='(no stderr)')}") from None
        except OSError as exc:
            sampler.stop()
            kill_started(procs, sampler)
            raise LaunchFailed(f"could not start: {exc}") from None
        sampler.stop()
        strays = [_describe(proc) for proc in sampler.alive()]
        if strays:  # descendants that outlived the launcher; they are ours to clean up
            kill_started([], sampler)
        bad = [code for code in codes if code != 0]
        if bad:
            raise LaunchFailed(f"exit code {bad[0]}: {telling_line(stderr, empty='(no stderr)')}")
    return RunResult(
        wall_s=wall,
        cpu_s=_children_cpu_s() - cpu_before,
        launcher_peak_bytes=sampler.launcher_hwm if launcher.argv is not None else None,
        tree_peak_bytes=sampler.tree_peak,
        samples=sampler.samples,
        sample_cost_s=sampler.sample_cost_s,
        strays=strays,
    )


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_launchers(np_: int, program: List[str], repeats: int, horovod_repeats: int,
                   backend: Optional[str] = None,
                   baseline: Optional[str] = None) -> List[Launcher]:
    chosen = ["--backend", backend] if backend else []
    compared = [Launcher("baseline", [baseline, *chosen, "-np", str(np_), *program], repeats)] \
        if baseline else []
    return [
        Launcher("bare", None, repeats),
        Launcher("poprun-lite", [bin_path("poprun-lite"), *chosen, "-np", str(np_), *program],
                 repeats),
        *compared,
        Launcher("mpirun", [bin_path("mpirun"), "-np", str(np_), "--oversubscribe",
                            "--allow-run-as-root", *program], repeats),
        Launcher("horovodrun", [bin_path("horovodrun"), "-np", str(np_), "--gloo",
                                "-H", f"localhost:{np_}", *program], horovod_repeats),
    ]


def run_all(launchers: List[Launcher], program: List[str], np_: int, timeout_s: float,
            interval_s: float) -> None:
    """One warm-up round, then interleaved measured rounds (order rotated each round)."""
    for launcher in launchers:
        if launcher.argv is not None and not os.access(launcher.argv[0], os.X_OK):
            launcher.error = f"not found: {launcher.argv[0]}"
    rounds = max(launcher.repeats for launcher in launchers)
    for round_no in range(-1, rounds):  # -1 is the warm-up
        shift = max(round_no, 0) % len(launchers)
        for launcher in launchers[shift:] + launchers[:shift]:
            if launcher.error is not None or round_no >= launcher.repeats:
                continue
            label = "warm-up" if round_no < 0 else f"round {round_no + 1}/{rounds}"
            print(f"  {label}: {launcher.name}", file=sys.stderr, flush=True)
            try:
                result = run_once(launcher, program, np_, timeout_s, interval_s)
            except LaunchFailed as exc:
                launcher.error = str(exc)
                print(f"    error: {exc}", file=sys.stderr, flush=True)
                continue
            if round_no >= 0:
                launcher.runs.append(result)


def _mib(value: float) -> float:
    return round(value / MIB, 2)


def summarize(launcher: Launcher) -> Dict[str, Any]:
    runs = launcher.runs
    summary: Dict[str, Any] = {
        "command": launcher.argv if launcher.argv is not None
        else "N x subprocess.Popen(program), then wait for all",
        "runs": len(runs),
        "error": launcher.error,
    }
    if not runs:
        return summary
    walls = [run.wall_s for run in runs]
    cpus = [run.cpu_s for run in runs]
    trees = [run.tree_peak_bytes for run in runs]
    samples = sum(run.samples for run in runs)
    summary.update({
        "wall_s": {"median": round(statistics.median(walls), 4), "min": round(min(walls), 4),
                   "max": round(max(walls), 4), "all": [round(w, 4) for w in walls]},
        "cpu_s": {"median": round(statistics.median(cpus), 3), "min": round(min(cpus), 3),
                  "all": [round(c, 3) for c in cpus]},
        "launcher_peak_rss_mib": None,
        "tree_peak_rss_mib": {"median": _mib(statistics.median(trees)), "max": _mib(max(trees))},
        "sampling": {
            "samples_per_run_median": statistics.median(run.samples for run in runs),
            "mean_cost_ms": round(1000 * sum(run.sample_cost_s for run in runs)
                                  / max(samples, 1), 3),
        },
        # Descendants still running when the launcher had exited (then killed by us).
        "stray_processes": sum(len(run.strays) for run in runs),
        "stray_commands": sorted({cmd for run in runs for cmd in run.strays}),
    })
    if launcher.argv is not None:
        peaks = [run.launcher_peak_bytes or 0 for run in runs]
        summary["launcher_peak_rss_mib"] = {"median": _mib(statistics.median(peaks)),
                                            "max": _mib(max(peaks))}
    else:
        summary["launcher_peak_rss_note"] = ("no launcher process: the benchmark's own Python "
                                             "does not count")
    return summary


def ratio(stats: Dict[str, Dict[str, Any]], top: str, bottom: str,
          key: str = "wall_s") -> Optional[Dict[str, float]]:
    if key not in stats.get(top, {}) or key not in stats.get(bottom, {}):
        return None
    a, b = stats[top][key], stats[bottom][key]
    return {"median": round(a["median"] / b["median"], 3), "min": round(a["min"] / b["min"], 3)}


def targets(stats: Dict[str, Dict[str, Any]],
            ratios: Dict[str, Optional[Dict[str, float]]]) -> Dict[str, Any]:
    vs_mpi = ratios["poprun-lite/mpirun wall time"]
    vs_hvd = ratios["poprun-lite/horovodrun wall time"]
    peak = stats.get("poprun-lite", {}).get("launcher_peak_rss_mib")
    peak_bytes = peak["max"] * MIB if peak else None
    return {
        f"poprun_lite_within_{TARGET_VS_MPIRUN:g}x_of_mpirun": {
            "measured_median_ratio": vs_mpi and vs_mpi["median"], "threshold": TARGET_VS_MPIRUN,
            "pass": None if vs_mpi is None else vs_mpi["median"] <= TARGET_VS_MPIRUN},
        "poprun_lite_under_5pct_of_horovodrun": {
            "measured_median_ratio": vs_hvd and vs_hvd["median"],
            "threshold": TARGET_VS_HOROVODRUN,
            "pass": None if vs_hvd is None else vs_hvd["median"] < TARGET_VS_HOROVODRUN},
        "poprun_lite_launcher_peak_under_40MB": {
            "measured_max_mib": peak and peak["max"],
            "threshold_bytes": TARGET_LAUNCHER_BYTES,
            "pass": None if peak_bytes is None else peak_bytes < TARGET_LAUNCHER_BYTES},
    }


def machine_info(load_before: Sequence[float]) -> Dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "python_version": platform.python_version(),
        "python": sys.executable,
        "platform": platform.platform(),
        "total_memory_mib": _mib(psutil.virtual_memory().total),
        **loadavg_keys(load_before),
        # Affects start-up: with it set, sources without a cached .pyc are compiled every run.
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
    }


def print_table(stats: Dict[str, Dict[str, Any]], ratios: Dict[str, Any],
                goals: Dict[str, Any]) -> None:
    def cell(value: Optional[Dict[str, float]], key: str, fmt: str) -> str:
        return format(value[key], fmt) if value else "-"

    print(f"\n{'launcher':<12} {'runs':>4} {'median s':>9} {'min s':>7} {'CPU s':>7} "
          f"{'launcher MiB':>12} {'tree MiB':>9}  error")
    for name, summary in stats.items():
        wall = summary.get("wall_s")
        print(f"{name:<12} {summary['runs']:>4} {cell(wall, 'median', '.3f'):>9} "
              f"{cell(wall, 'min', '.3f'):>7} {cell(summary.get('cpu_s'), 'median', '.2f'):>7} "
              f"{cell(summary.get('launcher_peak_rss_mib'), 'max', '.1f'):>12} "
              f"{cell(summary.get('tree_peak_rss_mib'), 'max', '.1f'):>9}  "
              f"{summary['error'] or ''}")
    print("(MiB columns: max over runs; bare has no launcher process)\n")
    for name, value in ratios.items():
        text = f"{value['median']:.3f} (min/min {value['min']:.3f})" if value else "n/a"
        print(f"{name + ':':<32} {text}")
    for name, goal in goals.items():
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[goal["pass"]]
        print(f"target {name:<40} {verdict}")


def plot(stats: Dict[str, Dict[str, Any]], np_: int, what: str, path: str) -> None:
    from matplotlib.ticker import FormatStrFormatter

    names = list(stats)
    xs = range(len(names))
    fig, (ax_time, ax_mem) = subplots(1, 2, figsize=(11, 4.5))

    medians = [stats[n]["wall_s"]["median"] if "wall_s" in stats[n] else 0 for n in names]
    mins = [stats[n]["wall_s"]["min"] if "wall_s" in stats[n] else 0 for n in names]
    ax_time.bar(xs, medians, color="tab:blue", label="median")
    ax_time.plot(xs, mins, "k_", markersize=18, label="min")
    ax_time.set_yscale("log")
    ax_time.set_ylabel("wall time (s, log scale)")
    ax_time.set_title(f"Wall time to run {np_} x {what}")
    for x, value in zip(xs, medians):
        if value:
            ax_time.annotate(f"{value:.3f} s", (x, value), ha="center", va="bottom", fontsize=9)
        else:  # no successful run: say so at the bottom of the axis
            ax_time.annotate("error", (x, 0.02), xycoords=("data", "axes fraction"),
                             ha="center", color="red", fontsize=9)
    ax_time.legend(loc="upper left")

    width = 0.4
    own = [(stats[n].get("launcher_peak_rss_mib") or {}).get("max", 0) for n in names]
    tree = [(stats[n].get("tree_peak_rss_mib") or {}).get("max", 0) for n in names]
    ax_mem.bar([x - width / 2 for x in xs], own, width, color="tab:orange",
               label="launcher process peak RSS")
    ax_mem.bar([x + width / 2 for x in xs], tree, width, color="tab:gray",
               label="whole tree peak RSS")
    ax_mem.axhline(TARGET_LAUNCHER_BYTES / MIB, color="red", linestyle="--", linewidth=1,
                   label="40 MB target (launcher)")
    ax_mem.set_yscale("log")
    ax_mem.set_ylim(bottom=1)
    ax_mem.set_ylabel("MiB (max over runs, log scale)")
    ax_mem.set_title("Peak memory")
    for x, name, value in zip(xs, names, own):
        if value:
            ax_mem.annotate(f"{value:.1f}", (x - width / 2, value), ha="center", va="bottom",
                            fontsize=9)
        else:  # bare has no launcher process; anything else here failed
            ax_mem.annotate("n/a" if name == "bare" else "error", (x - width / 2, 0.02),
                            xycoords=("data", "axes fraction"), ha="center", fontsize=9,
                            color="black" if name == "bare" else "red")
    ax_mem.legend(loc="upper left", fontsize=8)

    for ax in (ax_time, ax_mem):
        ax.set_xticks(list(xs), names)
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    save_figure(fig, path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=4, help="instances per launch")
    parser.add_argument("--repeats", type=int, default=10,
                        help="measured runs of bare, poprun-lite and mpirun")
    parser.add_argument("--horovodrun-repeats", type=int, default=3,
                        help="measured runs of horovodrun (seconds each)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per run")
    parser.add_argument("--interval-ms", type=float, default=2.0,
                        help="memory sampling interval")
    parser.add_argument("--backend", default=None,
                        help="poprun-lite's --backend (default: its own default, mpi)")
    parser.add_argument("--baseline", default=None, metavar="EXE",
                        help="another poprun-lite to measure in the same rounds, as 'baseline' "
                             "(e.g. a script that runs an older checkout): before/after numbers "
                             "taken side by side on a noisy machine")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME",
                        choices=["bare", "poprun-lite", "mpirun", "horovodrun"],
                        help="leave this launcher out, warm-up included (repeatable; e.g. "
                             "--skip horovodrun for quick runs)")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="pass",
                        help="what each instance runs: `python -c pass`, or an import of "
                             "TensorFlow and one Keras layer (the targets are for `pass`)")
    parser.add_argument("--out", default=None,
                        help="JSON output (default: results/launch_overhead.json, "
                             "launch_overhead_tensorflow.json for --program tensorflow); the "
                             "chart goes next to it with a .png suffix")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(RESULTS, "launch_overhead.json" if args.program == "pass"
                                   else f"launch_overhead_{args.program}.json")

    program = [sys.executable, "-c", PROGRAMS[args.program]]
    launchers = [launcher for launcher in make_launchers(
        args.np, program, args.repeats, args.horovodrun_repeats, args.backend, args.baseline)
        if launcher.name not in args.skip]
    import popdist_launcher
    compileall.compile_dir(os.path.dirname(popdist_launcher.__file__), quiet=1)
    load_before = os.getloadavg()
    print(f"launch overhead: {args.np} x {' '.join(program)}", file=sys.stderr)
    run_all(launchers, program, args.np, args.timeout, args.interval_ms / 1000)

    stats = {launcher.name: summarize(launcher) for launcher in launchers}
    pairs = [pair for pair in ("poprun-lite/mpirun", "poprun-lite/horovodrun", "poprun-lite/bare",
                               "baseline/mpirun", "poprun-lite/baseline")
             if "baseline" not in pair or args.baseline]
    ratios = {f"{pair} {name}": ratio(stats, *pair.split("/"), key=key)
              for pair in pairs for name, key in (("wall time", "wall_s"), ("CPU", "cpu_s"))}
    goals = targets(stats, ratios) if args.program == "pass" else {}
    report = {
        "benchmark": "launch_overhead",
        "what": f"wall time, CPU seconds and peak RSS of starting {args.np} x "
                f"`python -c {PROGRAMS[args.program]!r}` per launcher",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(load_before),
        "settings": {"np": args.np, "program": program, "program_name": args.program,
                     "backend": args.backend or "default", "skipped": args.skip,
                     "repeats": args.repeats,
                     "horovodrun_repeats": args.horovodrun_repeats, "warmup_runs": 1,
                     "timeout_s": args.timeout, "sample_interval_ms": args.interval_ms},
        "launchers": stats,
        "ratios": ratios,
        "targets": goals,
    }
    return finish(report, out, lambda png: plot(stats, args.np, f"`{args.program}`", png),
                  lambda: print_table(stats, ratios, goals), final_newline=True)


if __name__ == "__main__":
    sys.exit(main())
