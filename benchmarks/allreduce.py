"""Allreduce speed of popdist_launcher.collectives next to raw MPI, Horovod and TensorFlow.

What it measures
----------------
For every instance count N (default 2 and 4) and every peer below, one launch of
``benchmarks/_allreduce_worker.py`` on this machine (loopback only) measures

* the time of a float32 allreduce (op Sum) of one tensor of each size (default 4 KiB, 16 KiB,
  64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB), reported as the median over the measured
  iterations and as bus bandwidth ``busbw = bytes * 2 * (N - 1) / N / median_time`` (the
  nccl-tests convention: what each link carries in a ring allreduce; GB/s = 1e9 bytes/s);
* the time of one ResNet-50 gradient step: a single grouped (fused) allreduce, op Sum, of the 214
  float32 tensors with the shapes of ``tf.keras.applications.ResNet50(weights=None)``'s
  trainable variables (25,583,592 parameters, 102.3 MB).

Peers, each started by its own launcher:

* ``ours``          ``popdist_launcher.collectives`` (allreduce / grouped_allreduce, eager), under
                    ``poprun-lite -np N`` exactly as the launcher configures the job: with Open
                    MPI and an MPI-enabled Horovod installed (as here) ``--backend auto`` starts
                    a local job through mpirun and sets HOROVOD_CONTROLLER=mpi;
* ``ours-gloo``     the same, under ``poprun-lite -np N --backend local`` (the launcher starts
                    the processes itself; Horovod over Gloo, the fallback without Open MPI);
* ``mpi4py``        ``comm.Allreduce`` on numpy buffers under ``mpirun -np N --oversubscribe
                    --allow-run-as-root`` (the ResNet step packs the tensors into one buffer and
                    unpacks the result, copies included in the time);
* ``horovod-gloo``  plain ``horovod.tensorflow`` (hvd.allreduce / hvd.grouped_allreduce, eager)
                    under ``horovodrun --gloo -np N -H localhost:N``;
* ``horovod-mpi``   the same program under ``mpirun`` with HOROVOD_CONTROLLER=mpi and
                    HOROVOD_CPU_OPERATIONS=mpi;
* ``mwms``          TensorFlow's own collective all-reduce: ``MultiWorkerMirroredStrategy`` from
                    the TF_CONFIG poprun-lite writes, ``replica_context.all_reduce`` inside
                    ``strategy.run`` in a tf.function (a list goes through one batched all-reduce).

Each item gets uncounted warm-up calls, then its measured calls, each timed on its own on rank 0.
Big sizes get fewer iterations (``--bytes-per-size`` of data per size, at least
``--min-iters``). With ``--rounds R`` every (N, peer) launch is repeated R times, in an order
rotated from round to round, and the iterations of all rounds are pooled.

Knob sweep: ``ours`` again, with Horovod's HOROVOD_CYCLE_TIME (ms) and HOROVOD_FUSION_THRESHOLD
(bytes) passed with ``poprun-lite -x``, one knob at a time (the other at Horovod 0.28.1's default:
1 ms, 128 MiB, also measured, passed explicitly), measuring the ResNet step and the 4 MiB and
64 MiB busbw, for the largest N (``--knob-nps 2,4`` for more). "Best" is the value with the lowest
mean, over N and metrics, of its time relative to the best value's for that metric.

Scheduling: with the kernel's autogroup scheduling on (``sched_autogroup_enabled``, recorded),
each session shares the CPUs fairly with every other session. horovodrun starts every instance in
a session of its own; poprun-lite and mpirun keep all N instances in the launcher's one session
(each launcher here is started in a new session). On a machine busy with other work, that alone
gives horovodrun's instances N times the CPU share of the others and shows as latency at small
sizes. Each worker records its autogroup and whether it leads a session.

The medians are the headline and what the goals are judged on. The machine this runs on is shared
and small, so the JSON also has every item's fastest call, the ratios and goals on those, and the
1-minute load average when each launch started.

A peer that fails or times out is recorded with its error (the last error-looking line of its
stderr) instead of stopping the benchmark. Every launch has a timeout; on timeout the launch's
process group and every process it started are killed (only those, by pid).

Results: benchmarks/results/allreduce.json (``--out``) and a chart next to it (.png): busbw
against size (log-log, one subplot per N, one line per peer), the ResNet step per peer and the
knob sweep. A table is printed.

Run (about 8 minutes on 2 cores with the defaults)::

    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/allreduce.py
    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/allreduce.py --nps 4 --sizes 4M,64M \\
        --peers ours,mpi4py --no-knob-sweep
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _allreduce_worker as worker  # noqa: E402 (next to this file; imports no TensorFlow)
from _common import (cpu_model, finish, launch_env, loadavg_keys, save_figure,  # noqa: E402
                     stop, subplots, telling_line, tool)

KIB = 1024
MIB = 1024 * KIB
GB = 1e9
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_allreduce_worker.py")
DEFAULT_OUT = os.path.join(HERE, "results", "allreduce.json")
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M,64M"
PEERS = ("ours", "ours-gloo", "mpi4py", "horovod-gloo", "horovod-mpi", "mwms")
OTHER_PEERS = ("horovod-gloo", "horovod-mpi", "mwms")  # the "ahead of every other peer" goal
RESNET = worker.RESNET50
# Horovod 0.28.1's own defaults (the knob sweep's baseline).
HOROVOD_DEFAULT_CYCLE_MS = 1.0
HOROVOD_DEFAULT_FUSION_MIB = 128
# The goals for ours.
GOAL_VS_MPI4PY = 0.8
GOAL_VS_MPI4PY_FROM_BYTES = 4 * MIB
T = TypeVar("T")
ERROR_LINE = re.compile(r"(Error|Exception|error:|ERROR|timed out|Traceback|Killed|not found)")


# ---- what to run --------------------------------------------------------------------------
def parse_size(text: str) -> int:
    """``4K`` / ``1M`` (binary units) or plain bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]?)i?[Bb]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; use e.g. 4K, 1M, 64M or 4096")
    scale = {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}[match.group(2).lower()]
    return int(match.group(1)) * scale


def size_label(nbytes: int) -> str:
    for unit, scale in (("M", MIB), ("K", KIB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def csv(kind: Callable[[str], T]) -> Callable[[str], List[T]]:
    """An argparse type for a comma-separated list of ``kind``."""
    def parse(text: str) -> List[T]:
        return [kind(part) for part in text.split(",") if part.strip()]
    return parse


@dataclass(frozen=True)
class Plan:
    """The items each launch measures, and how often."""

    sizes: Tuple[int, ...]
    iters: Dict[int, int]
    warmup: Dict[int, int]
    resnet_iters: int
    resnet_warmup: int

    def items(self) -> List[str]:
        """The worker's ITEM arguments: BYTES:ITERS:WARMUP per size, then the ResNet step."""
        out = [f"{s}:{self.iters[s]}:{self.warmup[s]}" for s in self.sizes]
        if self.resnet_iters > 0:
            out.append(f"{RESNET}:{self.resnet_iters}:{self.resnet_warmup}")
        return out


def make_plan(args: argparse.Namespace) -> Plan:
    sizes = tuple(args.sizes)
    if args.iters is not None:
        if len(args.iters) != len(sizes):
            raise SystemExit(f"--iters has {len(args.iters)} counts for {len(sizes)} sizes")
        iters = dict(zip(sizes, args.iters))
    else:  # about --bytes-per-size of data per size, within [--min-iters, --max-iters]
        iters = {s: max(args.min_iters, min(args.max_iters, args.bytes_per_size // s))
                 for s in sizes}
    warmup = {s: args.warmup if args.warmup is not None else max(2, min(10, iters[s] // 10))
              for s in sizes}
    return Plan(sizes, iters, warmup, args.resnet_iters, args.resnet_warmup)


@dataclass
class Launch:
    """One launch of the worker: a peer with N instances (and, for the sweep, knob values)."""

    peer: str
    n: int
    items: List[str]
    knobs: Dict[str, str] = field(default_factory=dict)
    outcomes: List["Outcome"] = field(default_factory=list)

    @property
    def label(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in self.knobs.items())
        return f"{self.peer} n={self.n}" + (f" {knobs}" if knobs else "")


@dataclass
class Outcome:
    """What one launch gave: the worker's report, or an error."""

    command: List[str]
    wall_s: float
    exit_code: Optional[int]
    load_1min: float  # this machine's 1-minute load average when the launch started
    report: Optional[Dict[str, Any]] = None
    error: Optional[str] = None


def command(launch: Launch, out_json: str) -> List[str]:
    n = str(launch.n)
    program = [sys.executable, WORKER, launch.peer, out_json, *launch.items]
    mpirun = [tool("mpirun"), "-np", n, "--oversubscribe", "--allow-run-as-root"]
    if launch.peer in ("ours", "mwms", "ours-gloo"):
        exports = [arg for k, v in launch.knobs.items() for arg in ("-x", f"{k}={v}")]
        if launch.peer == "ours-gloo":  # the same worker code, Horovod over Gloo
            program[2] = "ours"
            exports = ["--backend", "local", *exports]
        return [tool("poprun-lite"), "-np", n, *exports, *program[1:]]
    if launch.peer == "mpi4py":
        return [*mpirun, *program]
    if launch.peer == "horovod-mpi":
        return [*mpirun, "-x", "HOROVOD_CONTROLLER=mpi", "-x", "HOROVOD_CPU_OPERATIONS=mpi",
                *program]
    if launch.peer == "horovod-gloo":
        return [tool("horovodrun"), "--gloo", "-np", n, "-H", f"localhost:{n}", *program]
    raise ValueError(f"unknown peer {launch.peer!r}")


# ---- running ------------------------------------------------------------------------------
def error_line(stream: IO[bytes]) -> str:
    """The last line of stderr that looks like an error, else its last line."""
    return telling_line(stream, ERROR_LINE, skip_prefix="poprun-lite: other instances",
                        empty="(no stderr)")


def run_launch(launch: Launch, timeout_s: float, workdir: str) -> Outcome:
    out_json = os.path.join(workdir, f"{launch.peer}-{launch.n}-{len(launch.outcomes)}-"
                                     f"{time.monotonic_ns()}.json")
    argv = command(launch, out_json)
    env = launch_env(keep_tf_log_level=True)  # knobs reach the instances through -x only
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=stderr, env=env, cwd=os.path.dirname(HERE),
                                    start_new_session=True)
        except OSError as exc:
            return Outcome(argv, 0.0, None, load, error=f"could not start: {exc}")
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            said = error_line(stderr)  # before the kill adds its own lines
            stop(proc, grace_s=5.0)
            return Outcome(argv, time.perf_counter() - started, None, load,
                           error=f"timed out after {timeout_s:g} s; stderr: {said}")
        wall = time.perf_counter() - started
        if code != 0:
            return Outcome(argv, wall, code, load, error=f"exit code {code}: {error_line(stderr)}")
        try:
            with open(out_json) as f:
                report = json.load(f)
        except (OSError, ValueError) as exc:
            return Outcome(argv, wall, code, load, error=f"no result from rank 0 ({exc}); stderr: "
                                                   f"{error_line(stderr)}")
    return Outcome(argv, wall, code, load, report=report)


def run_all(launches: List[Launch], rounds: int, timeout_s: float, workdir: str,
            title: str) -> None:
    """Every launch once per round, order rotated per round; a failed launch is not retried."""
    for round_no in range(rounds):
        shift = round_no % len(launches)
        for launch in launches[shift:] + launches[:shift]:
            if any(o.error for o in launch.outcomes):
                continue
            print(f"  {title} round {round_no + 1}/{rounds}: {launch.label} ...", end=" ",
                  file=sys.stderr, flush=True)
            outcome = run_launch(launch, timeout_s, workdir)
            launch.outcomes.append(outcome)
            print(f"{outcome.wall_s:.1f} s (load {outcome.load_1min:.1f})"
                  + (f"  ERROR {outcome.error}" if outcome.error else ""),
                  file=sys.stderr, flush=True)


# ---- summarizing --------------------------------------------------------------------------
def busbw(nbytes: int, n: int, seconds: float) -> float:
    return nbytes * 2 * (n - 1) / n / seconds / GB


def summarize(launch: Launch) -> Dict[str, Any]:
    """Pooled per-item statistics of a launch's rounds; the error if any round failed."""
    good = [o for o in launch.outcomes if o.report is not None]
    errors = [o.error for o in launch.outcomes if o.error]
    summary: Dict[str, Any] = {
        "command": launch.outcomes[0].command if launch.outcomes else None,
        "launches": len(launch.outcomes),
        "error": errors[0] if errors else None,
        "wall_s": [round(o.wall_s, 2) for o in launch.outcomes],
        "loadavg_1min_at_start": [round(o.load_1min, 2) for o in launch.outcomes],
    }
    if errors or not good:
        return summary
    summary["setup_s"] = [round(o.report["setup_s"], 2) for o in good]
    summary["info"] = good[0].report.get("info", {})
    pooled: Dict[str, Dict[str, Any]] = {}
    for outcome in good:
        for result in outcome.report["results"]:
            entry = pooled.setdefault(result["item"], {"bytes": result["bytes"], "times": [],
                                                       "warmup": result["warmup"], "ok": True})
            entry["times"].extend(result["times_s"])
            entry["ok"] = entry["ok"] and result["check"]["ok"]
    items: Dict[str, Any] = {}
    for name, entry in pooled.items():
        times = entry["times"]
        median = statistics.median(times)
        items[name] = {
            "bytes": entry["bytes"],
            "iters": len(times),
            "warmup_per_launch": entry["warmup"],
            "median_s": median,
            "min_s": min(times),
            "max_s": max(times),
            "busbw_gbps": busbw(entry["bytes"], launch.n, median),
            "busbw_gbps_at_min": busbw(entry["bytes"], launch.n, min(times)),
            "result_check_ok": entry["ok"],
        }
    summary["sizes"] = {k: v for k, v in items.items() if k != RESNET}
    if RESNET in items:
        summary[RESNET] = items[RESNET]
    return summary


def compare(results: Dict[str, Dict[str, Any]], sizes: Sequence[int], stat: str = "median"
            ) -> Dict[str, Any]:
    """Ours against each peer: busbw ratio per size, ResNet speed-up (>1: ours is faster).

    ``stat`` picks the per-item time compared: "median" (the headline) or "min".
    """
    bw_key = "busbw_gbps" if stat == "median" else "busbw_gbps_at_min"
    time_key = f"{stat}_s"
    ours = results.get("ours", {})
    out: Dict[str, Any] = {}
    for peer, summary in results.items():
        if peer == "ours":
            continue
        entry: Dict[str, Any] = {"busbw_ratio": {}, "resnet50_speedup": None}
        for size in sizes:
            a = ours.get("sizes", {}).get(str(size))
            b = summary.get("sizes", {}).get(str(size))
            entry["busbw_ratio"][str(size)] = (round(a[bw_key] / b[bw_key], 3)
                                               if a and b else None)
        a, b = ours.get(RESNET), summary.get(RESNET)
        if a and b:
            entry["resnet50_speedup"] = round(b[time_key] / a[time_key], 3)
        out[f"ours/{peer}"] = entry
    return out


def _bw_ratio(per_peer: Dict[str, Any], a: str, b: str, size: int) -> Optional[float]:
    x = per_peer.get(a, {}).get("sizes", {}).get(str(size))
    y = per_peer.get(b, {}).get("sizes", {}).get(str(size))
    return round(x["busbw_gbps"] / y["busbw_gbps"], 3) if x and y else None


def verdict(values: Iterable[Optional[bool]]) -> Optional[bool]:
    """False if any check failed, None if some could not be made (a peer failed), else True."""
    values = list(values)
    if any(v is False for v in values):
        return False
    if any(v is None for v in values) or not values:
        return None
    return True


def goals(ratios: Dict[str, Dict[str, Any]], sizes: Sequence[int]) -> Dict[str, Any]:
    vs_mpi: Dict[str, Any] = {}
    ahead: Dict[str, Any] = {}
    resnet: Dict[str, Any] = {}
    misses: List[str] = []
    for n, per_peer in ratios.items():
        mpi = per_peer.get("ours/mpi4py", {}).get("busbw_ratio", {})
        vs_mpi[n] = {}
        for size in sizes:
            if size >= GOAL_VS_MPI4PY_FROM_BYTES:
                r = mpi.get(str(size))
                vs_mpi[n][size_label(size)] = {"ratio": r, "pass": None if r is None
                                               else r >= GOAL_VS_MPI4PY}
        ahead[n] = {}
        resnet[n] = {}
        for peer in OTHER_PEERS:
            entry = per_peer.get(f"ours/{peer}")
            if entry is None:
                continue
            checks = {}
            for size in sizes:
                r = entry["busbw_ratio"].get(str(size))
                checks[size_label(size)] = {"ratio": r, "pass": None if r is None else r > 1.0}
                if r is not None and r <= 1.0:
                    misses.append(f"n={n} {peer} {size_label(size)}: {r:.2f}x")
            ahead[n][peer] = checks
            s = entry["resnet50_speedup"]
            resnet[n][peer] = {"speedup": s, "pass": None if s is None else s > 1.0}
    return {
        "ours_at_least_0.8x_mpi4py_busbw_at_4MB_and_above": {
            "threshold": GOAL_VS_MPI4PY, "by_n": vs_mpi,
            "pass": verdict(c["pass"] for per_n in vs_mpi.values() for c in per_n.values())},
        "ours_ahead_of_every_other_peer_at_every_size": {
            "other_peers": list(OTHER_PEERS),
            "note": "busbw ratio ours/peer > 1 at every size and N; mpi4py is judged by the 0.8x "
                    "goal only",
            "by_n": ahead, "misses": misses,
            "pass": verdict(c["pass"] for per_n in ahead.values() for checks in per_n.values()
                            for c in checks.values())},
        "ours_fastest_resnet50_step_among_other_peers": {
            "note": "not one of the issue's goals; speed-up = peer time / ours", "by_n": resnet,
            "pass": verdict(c["pass"] for per_n in resnet.values() for c in per_n.values())},
    }


# ---- knob sweep ---------------------------------------------------------------------------
def knob_settings(cycle_times: Sequence[float], fusion_mib: Sequence[int]
                  ) -> List[Tuple[float, int]]:
    """(cycle ms, fusion MiB): the baseline (both at Horovod's default), each cycle time at the
    default fusion threshold, then each threshold at the default cycle time; each once."""
    settings = [(HOROVOD_DEFAULT_CYCLE_MS, HOROVOD_DEFAULT_FUSION_MIB)]
    settings += [(c, HOROVOD_DEFAULT_FUSION_MIB) for c in cycle_times]
    settings += [(HOROVOD_DEFAULT_CYCLE_MS, f) for f in fusion_mib]
    return list(dict.fromkeys(settings))


def knob_env(cycle_ms: float, fusion_mib: int) -> Dict[str, str]:
    return {"HOROVOD_CYCLE_TIME": f"{cycle_ms:g}",
            "HOROVOD_FUSION_THRESHOLD": str(int(fusion_mib * MIB))}


def summarize_sweep(launches: Dict[Tuple[int, float, int], Launch], sizes: Sequence[int]
                    ) -> Dict[str, Any]:
    runs = []
    for (n, cycle, fusion), launch in launches.items():
        summary = summarize(launch)
        row: Dict[str, Any] = {
            "n": n, "cycle_time_ms": cycle, "fusion_threshold_mib": fusion,
            "poprun_lite_args": [a for k, v in launch.knobs.items() for a in ("-x", f"{k}={v}")],
            "launches": summary["launches"], "error": summary["error"]}
        if RESNET in summary:
            row["resnet50_median_s"] = round(summary[RESNET]["median_s"], 5)
            row["resnet50_min_s"] = round(summary[RESNET]["min_s"], 5)
        for size in sizes:
            item = summary.get("sizes", {}).get(str(size))
            row[f"busbw_gbps_{size_label(size)}"] = (round(item["busbw_gbps"], 4) if item
                                                     else None)
        runs.append(row)

    def best(rows: List[Dict[str, Any]], knob: str) -> Dict[str, Any]:
        """Per metric, the knob value that did best, per N; and the value best overall (lowest
        mean over N and metrics of time relative to the best value for that metric)."""
        metrics = ["resnet50_median_s"] + [f"busbw_gbps_{size_label(s)}" for s in sizes]
        by_metric: Dict[str, Dict[str, Any]] = {}
        scores: Dict[Any, List[float]] = {}
        for metric in metrics:
            for n in sorted({r["n"] for r in rows}):
                cands = [r for r in rows if r["n"] == n and r.get(metric)]
                if not cands:
                    continue
                # A time for ResNet, a bandwidth for sizes: turn both into "time relative to best".
                rel = {r[knob]: (r[metric] if metric.startswith("resnet") else 1 / r[metric])
                       for r in cands}
                low = min(rel.values())
                winner = min(rel, key=rel.get)
                by_metric.setdefault(metric, {})[str(n)] = winner
                for value, cost in rel.items():
                    scores.setdefault(value, []).append(cost / low)
        overall = {value: round(statistics.mean(c), 4) for value, c in scores.items()}
        return {"best_per_metric_and_n": by_metric,
                "mean_relative_cost": overall,  # 1.0 = best on every metric
                "best_overall": min(overall, key=overall.get) if overall else None}

    cycle_rows = [r for r in runs if r["fusion_threshold_mib"] == HOROVOD_DEFAULT_FUSION_MIB]
    fusion_rows = [r for r in runs if r["cycle_time_ms"] == HOROVOD_DEFAULT_CYCLE_MS]
    return {
        "what": "ours under poprun-lite -x HOROVOD_CYCLE_TIME=... -x HOROVOD_FUSION_THRESHOLD=...;"
                " one knob varied at a time, the other at Horovod's default "
                f"({HOROVOD_DEFAULT_CYCLE_MS:g} ms, {HOROVOD_DEFAULT_FUSION_MIB} MiB)",
        "runs": runs,
        "HOROVOD_CYCLE_TIME": best(cycle_rows, "cycle_time_ms"),
        "HOROVOD_FUSION_THRESHOLD": best(fusion_rows, "fusion_threshold_mib"),
    }


# ---- reporting ----------------------------------------------------------------------------
def read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def machine_info(load_before: Sequence[float]) -> Dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "total_memory_gib": round(psutil.virtual_memory().total / 1024 ** 3, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sched_autogroup_enabled": read_text("/proc/sys/kernel/sched_autogroup_enabled"),
        **loadavg_keys(load_before),
    }


def library_versions(results: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[str, Any]:
    versions: Dict[str, Any] = {}
    for per_peer in results.values():
        for summary in per_peer.values():
            for key in ("tensorflow", "horovod", "mpi4py", "mpi_library"):
                value = summary.get("info", {}).get(key)
                if value:
                    versions[key] = value
    return versions


def print_tables(results: Dict[str, Dict[str, Dict[str, Any]]], sizes: Sequence[int],
                 goal: Dict[str, Any], goal_at_min: Dict[str, Any],
                 sweep: Optional[Dict[str, Any]]) -> None:
    for n, per_peer in results.items():
        peers = list(per_peer)
        print(f"\nn={n}: busbw GB/s (median), ResNet-50 step ms (median)")
        print(f"{'size':>8} " + " ".join(f"{p:>12}" for p in peers))
        for size in sizes:
            cells = []
            for p in peers:
                item = per_peer[p].get("sizes", {}).get(str(size))
                cells.append(f"{item['busbw_gbps']:12.3f}" if item else f"{'error':>12}")
            print(f"{size_label(size):>8} " + " ".join(cells))
        cells = []
        for p in peers:
            item = per_peer[p].get(RESNET)
            cells.append(f"{item['median_s'] * 1000:12.1f}" if item else f"{'-':>12}")
        print(f"{'ResNet ms':>8} " + " ".join(cells))
        for p in peers:
            if per_peer[p]["error"]:
                print(f"  {p}: {per_peer[p]['error']}")
    for name, g in goal.items():
        print(f"goal {name}: {g['pass']} (judged on fastest calls: {goal_at_min[name]['pass']})")
    misses = goal["ours_ahead_of_every_other_peer_at_every_size"]["misses"]
    if misses:
        print("  not ahead: " + "; ".join(misses))
    if sweep:
        print("\nknob sweep (ours): n, cycle ms, fusion MiB, ResNet ms, busbw GB/s per size")
        for row in sweep["runs"]:
            bw = " ".join(f"{k[len('busbw_gbps_'):]}={v}" for k, v in row.items()
                          if k.startswith("busbw_gbps_"))
            rn = row.get("resnet50_median_s")
            print(f"  n={row['n']} {row['cycle_time_ms']:>5g} {row['fusion_threshold_mib']:>4} "
                  f"{'-' if rn is None else f'{rn * 1000:.1f}':>8} {bw}"
                  + (f" ERROR {row['error']}" if row["error"] else ""))
        for knob in ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD"):
            print(f"  best {knob}: {sweep[knob]['best_overall']} "
                  f"(mean relative cost {sweep[knob]['mean_relative_cost']})")


PEER_STYLE = {"ours": ("tab:red", "o"), "ours-gloo": ("tab:pink", "D"), "mpi4py": ("black", "s"),
              "horovod-gloo": ("tab:blue", "^"), "horovod-mpi": ("tab:green", "v"),
              "mwms": ("tab:purple", "D")}


def plot(results: Dict[str, Dict[str, Dict[str, Any]]], sizes: Sequence[int],
         sweep: Optional[Dict[str, Any]], path: str) -> None:
    ns = list(results)
    cols = max(2, len(ns))
    fig, axes = subplots(2, cols, figsize=(6 * cols, 9.5), squeeze=False)
    for ax, n in zip(axes[0], ns):
        for peer, summary in results[n].items():
            color, marker = PEER_STYLE.get(peer, ("gray", "."))
            points = [(s, summary["sizes"][str(s)]["busbw_gbps"])
                      for s in sizes if str(s) in summary.get("sizes", {})]
            label = peer if points else f"{peer} (failed)"
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker,
                        color=color, label=label, linewidth=2.2 if peer == "ours" else 1.4)
            else:
                ax.plot([], [], color=color, marker=marker, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(sizes), [size_label(s) for s in sizes])
        ax.set_xlabel("allreduce size (float32, op Sum)")
        ax.set_ylabel("bus bandwidth, GB/s (median)")
        ax.set_title(f"n={n}: busbw = bytes*2(n-1)/n / time")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[0][len(ns):]:
        ax.axis("off")

    ax = axes[1][0]
    peers = list(dict.fromkeys(p for n in ns for p in results[n]))
    width = 0.8 / max(1, len(ns))
    for i, n in enumerate(ns):
        heights = [(results[n].get(p, {}).get(RESNET) or {}).get("median_s", 0) * 1000
                   for p in peers]
        xs = [j + (i - (len(ns) - 1) / 2) * width for j in range(len(peers))]
        bars = ax.bar(xs, heights, width, label=f"n={n}", alpha=0.85)
        for bar, h in zip(bars, heights):
            ax.annotate(f"{h:.0f}" if h else "err", (bar.get_x() + bar.get_width() / 2, h),
                        ha="center", va="bottom", fontsize=7, color="black" if h else "red")
    ax.set_xticks(range(len(peers)), peers)
    ax.set_ylabel("ms (median)")
    ax.set_title(f"ResNet-50 gradient step: one grouped allreduce of "
                 f"{worker.RESNET50_TENSORS} tensors ({worker.resnet50_nbytes() / 1e6:.1f} MB)")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    if sweep and sweep["runs"]:
        rows = sweep["runs"]
        labels = list(dict.fromkeys(f"{r['cycle_time_ms']:g} ms\n{r['fusion_threshold_mib']} MiB"
                                    for r in rows))
        sweep_ns = sorted({r["n"] for r in rows})
        width = 0.8 / len(sweep_ns)
        for i, n in enumerate(sweep_ns):
            by_label = {f"{r['cycle_time_ms']:g} ms\n{r['fusion_threshold_mib']} MiB":
                        (r.get("resnet50_median_s") or 0) * 1000 for r in rows if r["n"] == n}
            xs = [j + (i - (len(sweep_ns) - 1) / 2) * width for j in range(len(labels))]
            ax.bar(xs, [by_label.get(lab, 0) for lab in labels], width, label=f"n={n}")
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel("ResNet-50 step, ms (median)")
        ax.set_title("ours: HOROVOD_CYCLE_TIME / HOROVOD_FUSION_THRESHOLD")
        ax.legend(fontsize=8)
    else:
        ax.axis("off")
    for ax in axes[1][2:]:
        ax.axis("off")
    save_figure(fig, path)


# ---- main ---------------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nps", type=csv(int), default=[2, 4], help="instance counts")
    p.add_argument("--peers", type=csv(str), default=list(PEERS), help="peers to measure")
    p.add_argument("--sizes", type=csv(parse_size), default=csv(parse_size)(DEFAULT_SIZES),
                   help="allreduce sizes (bytes, or with K/M suffix, binary)")
    p.add_argument("--iters", type=csv(int), default=None,
                   help="measured iterations per size (overrides --bytes-per-size)")
    p.add_argument("--bytes-per-size", type=parse_size, default=128 * MIB,
                   help="iterations per size = this / size, clamped to [min-iters, max-iters]")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up iterations per size (default: iterations/10, within 2..10)")
    p.add_argument("--resnet-iters", type=int, default=6, help="0 skips the ResNet step")
    p.add_argument("--resnet-warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1, help="launches per (N, peer), pooled")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per launch")
    p.add_argument("--no-knob-sweep", dest="knob_sweep", action="store_false")
    p.add_argument("--knob-nps", type=csv(int), default=None,
                   help="N for the sweep (default: the largest of --nps)")
    p.add_argument("--cycle-times", type=csv(float), default=[0.1, 1.0, 5.0],
                   help="HOROVOD_CYCLE_TIME values, ms")
    p.add_argument("--fusion-mib", type=csv(int), default=[16, 64, 128],
                   help="HOROVOD_FUSION_THRESHOLD values, MiB")
    p.add_argument("--knob-sizes", type=csv(parse_size), default=[4 * MIB, 64 * MIB],
                   help="sizes measured in the sweep (plus the ResNet step)")
    p.add_argument("--out", default=DEFAULT_OUT, help="JSON output; the chart gets .png")
    args = p.parse_args(argv)
    unknown = [peer for peer in args.peers if peer not in PEERS]
    if unknown:
        p.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    if any(s <= 0 or s % 4 for s in args.sizes + args.knob_sizes):
        p.error("sizes must be positive multiples of 4 bytes (float32)")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    knob_plan = make_plan(argparse.Namespace(**{**vars(args), "sizes": args.knob_sizes,
                                                "iters": None}))
    load_before = os.getloadavg()
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="allreduce-bench-")
    try:
        main_launches = [Launch(peer, n, plan.items()) for n in args.nps for peer in args.peers]
        print(f"allreduce: {len(main_launches)} launches x {args.rounds} round(s)",
              file=sys.stderr)
        run_all(main_launches, args.rounds, args.timeout, workdir, "peers")
        sweep_launches: Dict[Tuple[int, float, int], Launch] = {}
        if args.knob_sweep:
            # The baseline gets its own launches (with the defaults passed explicitly), among
            # the others, so that it sees the same machine load as the values it is compared to.
            for n in args.knob_nps or [max(args.nps)]:
                for cycle, fusion in knob_settings(args.cycle_times, args.fusion_mib):
                    sweep_launches[(n, cycle, fusion)] = Launch(
                        "ours", n, knob_plan.items(), knobs=knob_env(cycle, fusion))
            run_all(list(sweep_launches.values()), args.rounds, args.timeout, workdir, "knobs")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for launch in main_launches:
        results.setdefault(str(launch.n), {})[launch.peer] = summarize(launch)
    ratios = {n: compare(per_peer, plan.sizes) for n, per_peer in results.items()}
    ratios_min = {n: compare(per_peer, plan.sizes, "min") for n, per_peer in results.items()}
    goal = goals(ratios, plan.sizes)
    sweep = summarize_sweep(sweep_launches, args.knob_sizes) if sweep_launches else None
    report = {
        "benchmark": "allreduce",
        "what": "float32 allreduce (Sum) busbw per size and one fused ResNet-50 gradient step, "
                "popdist_launcher.collectives vs mpi4py, Horovod (Gloo, MPI) and "
                "MultiWorkerMirroredStrategy, same run, loopback only",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "total_wall_s": round(time.perf_counter() - started, 1),
        "machine": machine_info(load_before),
        "versions": library_versions(results),
        "settings": {
            "nps": args.nps, "peers": args.peers, "rounds": args.rounds,
            "timeout_s": args.timeout,
            "iters": {size_label(s): plan.iters[s] for s in plan.sizes},
            "warmup": {size_label(s): plan.warmup[s] for s in plan.sizes},
            "resnet50_iters": plan.resnet_iters, "resnet50_warmup": plan.resnet_warmup,
            "knob_sweep": args.knob_sweep and {
                "nps": args.knob_nps or [max(args.nps)], "cycle_times_ms": args.cycle_times,
                "fusion_thresholds_mib": args.fusion_mib,
                "sizes": [size_label(s) for s in args.knob_sizes]},
            "busbw": "bytes * 2 * (n - 1) / n / median time, GB/s = 1e9 bytes/s",
            "timing": "each measured call timed on its own on rank 0, after warm-up and a "
                      "barrier; median over calls (pooled over rounds)",
        },
        "sizes": list(plan.sizes),
        "size_labels": [size_label(s) for s in plan.sizes],
        "resnet50": {"tensors": worker.RESNET50_TENSORS, "params": worker.RESNET50_PARAMS,
                     "bytes": worker.resnet50_nbytes()},
        "results": results,
        "ratios_ours_vs_peer": ratios,
        "goals": goal,
        # The same with each item's fastest call instead of its median: less sensitive to other
        # jobs on a shared machine, but not what the goals are stated on.
        "ratios_ours_vs_peer_at_min_time": ratios_min,
        "goals_at_min_time": goals(ratios_min, plan.sizes),
        "knob_sweep": sweep,
        # What the transport choice buys: our collectives as auto starts them (mpirun, Horovod
        # over MPI) against the same under --backend local (Gloo).
        "ours_vs_ours_gloo_busbw": {
            n: {size_label(size): _bw_ratio(per_peer, "ours", "ours-gloo", size)
                for size in plan.sizes}
            for n, per_peer in results.items()},
    }
    return finish(report, args.out, lambda png: plot(results, plan.sizes, sweep, png),
                  lambda: print_tables(results, plan.sizes, goal, report["goals_at_min_time"],
                                       sweep),
                  final_newline=True, wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
