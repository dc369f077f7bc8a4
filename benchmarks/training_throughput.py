"""Training throughput of popdist_launcher's strategies against the plain engines they build on.

What it measures
----------------
Samples per second of one small CNN (conv 3x3x16 - relu - maxpool - conv 3x3x32 - relu - global
average pool - dense 10) trained with SGD on random 32x32x3 float32 images, for each *global*
batch of ``--global-batch`` (default 128 and 1024: the small one shows per-step overhead, the
large one compute; each split evenly over the instances) with -np 1, 2 and 4 instances. Variants:

=====================  ===========================================  =========================
variant                engine                                       started by
=====================  ===========================================  =========================
popdist                PopDistStrategy (Horovod allreduce)          poprun-lite -np N
ipu-horovod            IPUHorovodStrategy (Horovod allreduce)       poprun-lite -np N
ipu-multi-worker       IPUMultiWorkerStrategy (TF collectives)      poprun-lite -np N
horovod                plain hvd.DistributedGradientTape            horovodrun --gloo -np N
mwms                   plain tf.distribute.MultiWorkerMirrored...   poprun-lite -np N (TF_CONFIG)
<each>-fit             the same engine under Keras ``model.fit``;   as above
                       horovod-fit: Horovod's Keras
                       DistributedOptimizer and broadcast callback
=====================  ===========================================  =========================

popdist and ipu-horovod are compared with ``horovod`` and ipu-multi-worker with ``mwms`` (the
``-fit`` variants with the ``-fit`` of their engine): the goal is that each of our strategies
reaches at least 0.97x the samples/s of the plain engine it is built on, at every -np and batch.

How
---
Every instance runs ``benchmarks/_throughput_worker.py`` (see its docstring): the same model,
optimizer, seed, global batch and data (generated in memory per replica, cached, repeated,
prefetched, so input is never the bottleneck), ``--warmup`` untimed steps (tracing included), a
barrier (an all-reduce over every replica), then ``--steps`` timed steps; instance 0 stops the
clock after reading the last loss back to the host, and reports samples/s = steps x global batch /
seconds, its CPU time (all threads) and minor page faults per step. Each instance uses
``max(1, cores // N)`` intra-op threads and 2 inter-op threads, the same for every variant, so N
processes do not oversubscribe the machine more than they must. ``--onednn off`` runs Eigen's
CPU kernels instead of oneDNN's (TensorFlow's own default on CPUs without AVX512-VNNI, AVX-VNNI or
AMX, e.g. AVX2-only AMD EPYCs); the machine entry records the CPU's features and which kernels
TensorFlow ran.

Each (variant, N) is launched ``--repeats`` times; every round runs each N once per variant, in a
variant order shuffled (seeded) per round and N, so machine noise spreads over all variants; the
median over repeats is reported. The final loss of instance 0 is recorded too: at one N every
custom-loop variant does the same computation, so their losses must agree (a check that the
comparison is fair).

The goal is judged on the ratio of the median wall-clock samples/s. On a shared machine other
jobs' load easily moves one launch by 10-50%, so more ratios help tell a real gap from noise:
``median_step`` (samples/s at each launch's median step time, which bursts of load barely move),
``paired`` (median over rounds of ours/plain between launches of the same round) with its range
over the rounds, and ``cpu_per_step`` (plain's CPU time per step over ours: the work a step
costs, whatever else runs).

Every launch has a timeout; on expiry the launcher's process group (and any descendant it
started) is stopped, first with SIGTERM then SIGKILL, and the variant is recorded with an error
(the last line of its stderr), as is a launch that fails. Only loopback addresses are used.

Output: benchmarks/results/training_throughput.json (``--out``) and a plot next to it (same name,
.png): per global batch, samples/s against N, one line per variant, and our/plain ratios against
the 0.97 goal. The JSON also records every launch, the machine (CPU model and features), the stack
(Python, TensorFlow, Keras 2, Horovod), its load average at each launch, and which
popdist_launcher sources were measured (git commit plus a hash of the working tree's sources).

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/training_throughput.py``
(``--steps``, ``--warmup``, ``--np``, ``--repeats``, ``--variants``, ``--global-batch``,
``--onednn`` to change the defaults). The defaults (3 repeats of 10 variants at -np 1, 2, 4 and
two batches: 180 launches, most of each spent starting TensorFlow) take about 40 minutes on 2
otherwise idle cores; ``--variants popdist,ipu-horovod,ipu-multi-worker,horovod,mwms`` (the custom
loops) half that.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (ONEDNN_CHOICES, ONEDNN_HELP, ROOT, TRAINING_LAUNCHER_PREFIXES,  # noqa: E402
                     LaunchStats, finish, git_state, launch_env, launch_error,
                     stack_machine_info, run_logged, save_figure, subplots, tool, with_onednn)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_throughput_worker.py")
DEFAULT_OUT = os.path.join(HERE, "results", "training_throughput.json")
GOAL = 0.97  # each of our strategies at least 0.97x the plain engine it is built on


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    launcher: str                    # "poprun-lite" or "horovodrun"
    baseline: Optional[str] = None   # for our strategies: the plain engine they are built on


LOOP_VARIANTS: Tuple[Variant, ...] = (
    Variant("popdist", "PopDistStrategy, custom loop, poprun-lite", "poprun-lite", "horovod"),
    Variant("ipu-horovod", "IPUHorovodStrategy, custom loop, poprun-lite", "poprun-lite",
            "horovod"),
    Variant("ipu-multi-worker", "IPUMultiWorkerStrategy, custom loop, poprun-lite", "poprun-lite",
            "mwms"),
    Variant("horovod", "plain Horovod DistributedGradientTape, horovodrun --gloo", "horovodrun"),
    Variant("mwms", "plain tf.distribute.MultiWorkerMirroredStrategy, custom loop, poprun-lite",
            "poprun-lite"),
)
# The same engines under Keras fit; plain Horovod with its Keras DistributedOptimizer.
FIT_VARIANTS: Tuple[Variant, ...] = tuple(
    Variant(f"{v.name}-fit", v.description.replace("custom loop", "Keras fit").replace(
        "DistributedGradientTape", "Keras DistributedOptimizer, fit"), v.launcher,
        f"{v.baseline}-fit" if v.baseline else None)
    for v in LOOP_VARIANTS)
VARIANTS = LOOP_VARIANTS + FIT_VARIANTS
BY_NAME = {v.name: v for v in VARIANTS}


@dataclass
class Launch:
    """One launch of one variant at one N."""
    variant: str
    np: int
    round: int
    ok: bool
    wall_s: float
    samples_per_s: Optional[float] = None
    median_step_samples_per_s: Optional[float] = None
    final_loss_instance0: Optional[float] = None
    cpu_ms_per_step: Optional[float] = None  # instance 0's CPU time (user + system) per step
    minor_faults_per_step: Optional[float] = None
    onednn: Optional[bool] = None  # whether TensorFlow ran its oneDNN kernels (else Eigen's)
    setup_s: Optional[float] = None
    error: Optional[str] = None
    load_1min: Optional[float] = None  # the machine's load average when the launch started
    stray_processes: List[str] = field(default_factory=list)  # outlived the launcher; killed


@dataclass
class Cell(LaunchStats):
    """All launches of one variant at one N."""
    launches: List[Launch] = field(default_factory=list)


# ---- launching -----------------------------------------------------------------------------------
def command(variant: Variant, np_: int, start_timeout_s: float) -> List[str]:
    """The launch of ``variant`` at ``np_`` instances, up to the worker's path (its arguments
    follow)."""
    if variant.launcher == "horovodrun":
        return [tool("horovodrun", which=False), "--gloo", "-np", str(np_),
                "-H", f"localhost:{np_}", "--network-interfaces", "lo",
                "--start-timeout", str(int(start_timeout_s)), sys.executable, WORKER]
    return [tool("poprun-lite", which=False), "-np", str(np_),
            "--start-timeout", str(start_timeout_s), WORKER]


def group_members(pgid: int) -> List[psutil.Process]:
    """Live processes in process group ``pgid`` (a group this benchmark created)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def reap_group(pgid: int, patience_s: float = 3.0) -> List[str]:
    """Processes of the launcher's group that outlive it by ``patience_s``: SIGKILLed; their
    command lines are returned so the report shows them."""
    deadline = time.monotonic() + patience_s
    members = group_members(pgid)
    while members and time.monotonic() < deadline:
        time.sleep(0.1)
        members = group_members(pgid)
    described = []
    for member in members:
        try:
            described.append(" ".join(member.cmdline())[:200])
            member.kill()
        except psutil.Error:
            pass
    return described


@dataclass
class WorkerRun:
    """One launch of the throughput worker: instance 0's result, or why there is none."""
    wall_s: float
    load_1min: float                  # the machine's load average when the launch started
    stray_processes: List[str]        # outlived the launcher; killed
    result: Optional[Dict[str, Any]] = None
    error: Optional[str] = None


def run_worker(launcher: List[str], np_: int, worker_args: List[str], args: argparse.Namespace,
               workdir: str) -> WorkerRun:
    """The worker started by ``launcher`` (:func:`command`) at ``np_`` instances in ``workdir``:
    ``worker_args``, then the result file and the threads every launch uses (intra-op
    ``max(1, cores // np_)``, inter-op 2); launcher variables dropped from the environment,
    ``args.onednn`` applied, ``args.timeout`` as the bound; what outlives the launcher is killed."""
    result_path = os.path.join(workdir, "result.json")
    argv = [*launcher, *worker_args, "--result", result_path,
            "--intra-op-threads", str(max(1, (os.cpu_count() or 1) // np_)),
            "--inter-op-threads", "2"]
    load = os.getloadavg()[0]
    env = with_onednn(launch_env(TRAINING_LAUNCHER_PREFIXES), args.onednn)
    rc, wall, pgid = run_logged(argv, workdir, args.timeout, env)
    run = WorkerRun(wall, load, reap_group(pgid))
    run.error = launch_error(rc, args.timeout, workdir, result_path)
    if run.error is None:
        with open(result_path) as f:
            run.result = json.load(f)
    return run


def launch(variant: Variant, np_: int, round_: int, args: argparse.Namespace,
           global_batch: int) -> Launch:
    """Run one variant at one N to completion (or timeout); parse instance 0's result."""
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        run = run_worker(command(variant, np_, args.timeout), np_,
                         ["--variant", variant.name, "--global-batch", str(global_batch),
                          "--steps", str(args.steps), "--warmup", str(args.warmup),
                          "--seed", str(args.seed)], args, tmp)
    result = run.result
    if result is None:
        return Launch(variant.name, np_, round_, False, run.wall_s, error=run.error,
                      load_1min=run.load_1min, stray_processes=run.stray_processes)
    return Launch(variant.name, np_, round_, True, run.wall_s,
                  samples_per_s=result["samples_per_s"],
                  median_step_samples_per_s=global_batch / result["median_step_s"],
                  final_loss_instance0=result["final_loss_instance0"],
                  cpu_ms_per_step=result["cpu_user_ms_per_step"]
                  + result["cpu_system_ms_per_step"],
                  minor_faults_per_step=result["minor_faults_per_step"],
                  onednn=result.get("onednn"), setup_s=result["setup_s"],
                  load_1min=run.load_1min, stray_processes=run.stray_processes)


def run_all(variants: Sequence[Variant], nps: Sequence[int], args: argparse.Namespace,
            global_batch: int, progress: List[int]) -> Dict[str, Dict[int, Cell]]:
    """Every round: each N, each variant once, in a variant order shuffled (seeded) per round
    and N, so no variant always runs right after the same other one."""
    cells: Dict[str, Dict[int, Cell]] = {v.name: {n: Cell() for n in nps} for v in variants}
    total = len(variants) * len(nps) * args.repeats * len(args.batch_list)
    for round_ in range(args.repeats):
        for np_ in nps:
            order = list(variants)
            random.Random(f"{args.seed}-{round_}-{np_}").shuffle(order)
            for variant in order:
                if args.skip_failed and any(not r.ok for r in cells[variant.name][np_].launches):
                    continue
                run = launch(variant, np_, round_, args, global_batch)
                cells[variant.name][np_].launches.append(run)
                progress[0] += 1
                shown = (f"{run.samples_per_s:8.0f} samples/s" if run.ok
                         else f"FAILED: {run.error}")
                print(f"[{progress[0]:3d}/{total}] batch {global_batch} round {round_ + 1} "
                      f"-np {np_} {variant.name:21s} "
                      f"{shown}  ({run.wall_s:.1f} s)", flush=True)
    return cells


# ---- summary -------------------------------------------------------------------------------------
def summarize(cells: Dict[str, Dict[int, Cell]], nps: Sequence[int]) -> Dict[str, Any]:
    per_variant: Dict[str, Any] = {}
    for name, by_np in cells.items():
        per_np = {}
        for np_ in nps:
            cell = by_np[np_]
            values = cell.values("samples_per_s")
            median = cell.median("samples_per_s")
            per_np[str(np_)] = {
                "samples_per_s_median": median,
                "samples_per_s_repeats": values,
                "spread": (max(values) - min(values)) / median if len(values) > 1 else None,
                "median_step_samples_per_s_median": cell.median("median_step_samples_per_s"),
                "median_step_samples_per_s_repeats": cell.values("median_step_samples_per_s"),
                "final_loss_instance0": cell.values("final_loss_instance0"),
                "cpu_ms_per_step_median": cell.median("cpu_ms_per_step"),
                "minor_faults_per_step_median": cell.median("minor_faults_per_step"),
                "setup_s_median": cell.median("setup_s"),
                "errors": [r.error for r in cell.launches if not r.ok],
                "stray_processes": sum(len(r.stray_processes) for r in cell.launches),
            }
        per_variant[name] = {"description": BY_NAME[name].description,
                             "launcher": BY_NAME[name].launcher, "by_np": per_np}
    return per_variant


def round_ratios(cells: Dict[str, Dict[int, Cell]], ours: str, plain: str, np_: int
                 ) -> List[float]:
    """ours/plain samples/s within each round (launched close together in time)."""
    plain_by_round = {r.round: r.samples_per_s for r in cells[plain][np_].launches if r.ok}
    return [r.samples_per_s / plain_by_round[r.round] for r in cells[ours][np_].launches
            if r.ok and r.round in plain_by_round]


def paired_ratio(cells: Dict[str, Dict[int, Cell]], ours: str, plain: str, np_: int
                 ) -> Optional[float]:
    """Median over rounds of ours/plain within a round."""
    ratios = round_ratios(cells, ours, plain, np_)
    return statistics.median(ratios) if ratios else None


def ratios_and_goal(per_variant: Dict[str, Any], cells: Dict[str, Dict[int, Cell]],
                    nps: Sequence[int]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Ours / plain engine at every N, and the goal check.

    ``samples_per_s``: ratio of the medians of the wall-clock samples/s (what the goal is judged
    on). Also, to tell a real gap from machine noise: ``median_step``, the same from each
    launch's median step time (insensitive to bursts of load from other jobs), ``paired``, the
    median over rounds of the ratio between launches of the same round (``paired_range``: the
    lowest and highest of those), ``cpu_per_step``, plain's CPU time per step / ours (instance 0,
    all threads: the work a step costs, which other jobs' load hardly moves), and ``noise_control``:
    PopDistStrategy / IPUHorovodStrategy, two strategies that build the very same engine, so
    its distance from 1 shows how large a gap the noise alone produces.
    """
    metrics = {"samples_per_s": "samples_per_s_median",
               "median_step": "median_step_samples_per_s_median"}
    ratios: Dict[str, Any] = {m: {} for m in (*metrics, "paired", "paired_range", "cpu_per_step")}
    goal: Dict[str, Any] = {
        "threshold": GOAL,
        "statement": ("each of our strategies at least 0.97x of the plain engine it is built "
                      "on, at every -np"),
        "judged_on": "ratio of median wall-clock samples/s",
        "checks": {}, "checks_median_step": {}}
    for variant in VARIANTS:
        if variant.baseline is None or variant.name not in per_variant \
                or variant.baseline not in per_variant:
            continue
        key = f"{variant.name}/{variant.baseline}"
        for metric, field_name in metrics.items():
            ratios[metric][key] = {}
            for np_ in nps:
                ours = per_variant[variant.name]["by_np"][str(np_)][field_name]
                plain = per_variant[variant.baseline]["by_np"][str(np_)][field_name]
                ratios[metric][key][str(np_)] = ours / plain if ours is not None and plain \
                    else None
        ratios["paired"][key] = {str(n): paired_ratio(cells, variant.name, variant.baseline, n)
                                 for n in nps}
        ratios["paired_range"][key] = {
            str(n): (lambda rs: [min(rs), max(rs)] if rs else None)(
                round_ratios(cells, variant.name, variant.baseline, n)) for n in nps}
        ratios["cpu_per_step"][key] = {str(n): (lambda o, p: p / o if o and p else None)(
            per_variant[variant.name]["by_np"][str(n)]["cpu_ms_per_step_median"],
            per_variant[variant.baseline]["by_np"][str(n)]["cpu_ms_per_step_median"])
            for n in nps}
        for check, metric in (("checks", "samples_per_s"), ("checks_median_step", "median_step")):
            goal[check][key] = {n: r is not None and r >= GOAL
                                for n, r in ratios[metric][key].items()}
    if "popdist" in per_variant and "ipu-horovod" in per_variant:
        # Same class of engine (HorovodExtended, same options): any gap is measurement noise.
        ratios["noise_control"] = {"popdist/ipu-horovod": {
            str(n): (lambda a, b: a / b if a is not None and b else None)(
                per_variant["popdist"]["by_np"][str(n)]["samples_per_s_median"],
                per_variant["ipu-horovod"]["by_np"][str(n)]["samples_per_s_median"])
            for n in nps}}
    goal["met"] = bool(goal["checks"]) and all(
        ok for by_np in goal["checks"].values() for ok in by_np.values())
    goal["met_on_median_step"] = bool(goal["checks_median_step"]) and all(
        ok for by_np in goal["checks_median_step"].values() for ok in by_np.values())
    return ratios, goal


def loss_agreement(per_variant: Dict[str, Any], nps: Sequence[int]) -> Dict[str, Any]:
    """Largest difference between the custom-loop variants' final losses at each N (the same
    work: ~0)."""
    out = {}
    loops = {v.name for v in LOOP_VARIANTS}  # fit reports a running mean, on other batches
    for np_ in nps:
        losses = [loss for name, v in per_variant.items() if name in loops
                  for loss in v["by_np"][str(np_)]["final_loss_instance0"]]
        out[str(np_)] = max(losses) - min(losses) if losses else None
    return out


def code_version() -> Dict[str, Any]:
    """Which popdist_launcher was measured: git commit, dirty or not, and a hash of its sources
    (the working tree may hold uncommitted changes)."""
    digest = hashlib.sha256()
    package = os.path.join(ROOT, "popdist_launcher")
    for folder, dirs, files in sorted(os.walk(package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, ROOT).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return {**git_state(), "popdist_launcher_sources_sha256": digest.hexdigest()}


def print_table(per_variant: Dict[str, Any], ratios: Dict[str, Any], goal: Dict[str, Any],
                nps: Sequence[int], global_batch: int) -> None:
    def fmt(value: Optional[float], spec: str) -> str:
        return format(value, spec) if value is not None else "-"

    def row(label: str, values: Sequence[str]) -> None:
        print(f"{label:34s}" + "".join(f"{v:>11s}" for v in values))

    print(f"\nglobal batch {global_batch}")
    row("samples/s, median of repeats", [f"-np {n}" for n in nps])
    for name, data in per_variant.items():
        row(name, [fmt(data["by_np"][str(n)]["samples_per_s_median"], ".0f") for n in nps])
    print("ours/plain (! = below the goal); in brackets: median-step ratio, paired ratio "
          "(its range), CPU per step plain/ours")
    for key, by_np in ratios["samples_per_s"].items():
        row(key, [fmt(by_np[str(n)], ".3f") + ("" if goal["checks"][key][str(n)] else "!")
                  for n in nps])
        row("", [f"[{fmt(ratios['median_step'][key][str(n)], '.2f')},"
                 f"{fmt(ratios['paired'][key][str(n)], '.2f')}]" for n in nps])
        row("", ["(" + "-".join(fmt(x, ".2f") for x in ratios["paired_range"][key][str(n)] or [])
                 + ")" for n in nps])
        row("", [f"cpu {fmt(ratios['cpu_per_step'][key][str(n)], '.2f')}" for n in nps])
    for key, by_np in ratios.get("noise_control", {}).items():
        row(f"{key} (control)", [fmt(by_np[str(n)], ".3f") for n in nps])
    print(f"goal (>= {GOAL}x at every -np, batch {global_batch}): "
          f"{'met' if goal['met'] else 'NOT met'}"
          f" (on median step times: {'met' if goal['met_on_median_step'] else 'NOT met'})")


def plot(batches: Dict[str, Any], nps: Sequence[int], path: str, title: str) -> None:
    """One row per global batch: samples/s against -np, and ours / plain against the goal."""
    fig, axes = subplots(len(batches), 2, figsize=(13, 5 * len(batches)), squeeze=False,
                         gridspec_kw={"width_ratios": [3, 2]})
    for (batch, result), (ax, rax) in zip(batches.items(), axes):
        plot_batch(ax, rax, result["variants"], result["ratios"], nps, int(batch))
    save_figure(fig, path, title)


STYLES = {"popdist": ("tab:blue", "o"), "ipu-horovod": ("tab:cyan", "s"),
          "horovod": ("black", "D"), "ipu-multi-worker": ("tab:orange", "^"),
          "mwms": ("tab:red", "v")}


def style(name: str) -> Tuple[str, str, str]:
    """Colour and marker by engine; a dashed line for Keras fit."""
    color, marker = STYLES.get(name.replace("-fit", ""), ("gray", "x"))
    return color, marker, "--" if name.endswith("-fit") else "-"


def plot_batch(ax: Any, rax: Any, per_variant: Dict[str, Any], ratios: Dict[str, Any],
               nps: Sequence[int], global_batch: int) -> None:
    for name, data in per_variant.items():
        color, marker, line = style(name)
        xs = [n for n in nps if data["by_np"][str(n)]["samples_per_s_median"] is not None]
        ax.plot(xs, [data["by_np"][str(n)]["samples_per_s_median"] for n in xs], line,
                color=color, marker=marker, label=f"{name}: {data['description']}")
        for n in nps:
            repeats = data["by_np"][str(n)]["samples_per_s_repeats"]
            ax.scatter([n] * len(repeats), repeats, color=color, marker=marker, s=12, alpha=0.35)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(nps), [str(n) for n in nps])
    ax.set_xlabel("instances (-np)")
    ax.set_ylabel("samples/s (median; faint points: repeats)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(f"Training throughput, global batch {global_batch}")
    for metric, line, suffix in (("samples_per_s", "-", ""),
                                 ("median_step", ":", " (median step)")):
        for key, by_np in ratios[metric].items():
            color, marker, _ = style(key.split("/")[0])
            xs = [n for n in nps if by_np[str(n)] is not None]
            rax.plot(xs, [by_np[str(n)] for n in xs], line, color=color, marker=marker,
                     alpha=1.0 if not suffix else 0.5, label=key + suffix)
    for key, by_np in ratios.get("noise_control", {}).items():
        xs = [n for n in nps if by_np[str(n)] is not None]
        rax.plot(xs, [by_np[str(n)] for n in xs], "-.", color="gray", marker=".",
                 label=f"{key} (same engine: noise)")
    rax.axhline(GOAL, color="green", linestyle="--", label=f"goal {GOAL}x")
    rax.axhline(1.0, color="gray", linewidth=0.8)
    rax.set_xscale("log", base=2)
    rax.set_xticks(list(nps), [str(n) for n in nps])
    rax.set_xlabel("instances (-np)")
    rax.set_ylabel("ours / plain engine (medians)")
    rax.grid(True, alpha=0.3)
    rax.legend(fontsize=7, loc="best", framealpha=0.6)
    rax.set_title(f"Ratio to the plain engine, global batch {global_batch}")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", default="1,2,4", help="comma-separated instance counts")
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS),
                        help="comma-separated subset of: " + ", ".join(BY_NAME))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per launch")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    parser.add_argument("--repeats", type=int, default=3, help="launches per variant and -np")
    parser.add_argument("--global-batch", default="128,1024",
                        help="comma-separated global batches: a small one shows per-step "
                             "overhead, a large one compute")
    parser.add_argument("--onednn", choices=ONEDNN_CHOICES, default="default", help=ONEDNN_HELP)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per launch")
    parser.add_argument("--skip-failed", action="store_true",
                        help="do not repeat a (variant, -np) that has failed once")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON result; the plot goes next to it")
    args = parser.parse_args(argv)
    args.np_list = [int(n) for n in args.np.split(",") if n.strip()]
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    args.batch_list = [int(b) for b in args.global_batch.split(",") if b.strip()]
    unknown = [v for v in args.variant_list if v not in BY_NAME]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    bad = [(b, n) for b in args.batch_list for n in args.np_list if n < 1 or b % n]
    if bad:
        parser.error(f"each --global-batch must split evenly over each -np; not {bad}")
    return args


def measure_batch(variants: Sequence[Variant], args: argparse.Namespace, global_batch: int,
                  progress: List[int]) -> Dict[str, Any]:
    """Every variant at every -np for one global batch: the launches, medians, ratios, goal."""
    cells = run_all(variants, args.np_list, args, global_batch, progress)
    per_variant = summarize(cells, args.np_list)
    ratios, goal = ratios_and_goal(per_variant, cells, args.np_list)
    return {"variants": per_variant, "ratios": ratios, "goal": goal,
            "final_loss_max_difference_between_variants": loss_agreement(per_variant,
                                                                         args.np_list),
            "launches": [vars(run) for by_np in cells.values() for cell in by_np.values()
                         for run in cell.launches]}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    variants = [BY_NAME[name] for name in args.variant_list]
    load_before = os.getloadavg()
    code_before = code_version()
    started = time.perf_counter()
    progress = [0]
    batches = {str(b): measure_batch(variants, args, b, progress) for b in args.batch_list}
    onednn = sorted({str(r["onednn"]) for b in batches.values() for r in b["launches"]})
    report = {
        "benchmark": "training_throughput",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "what": ("samples/s of a small CNN (conv3x3x16-relu-maxpool-conv3x3x32-relu-GAP-dense10, "
                 "SGD) on random 32x32x3 images; wall clock on instance 0 over the timed steps"),
        "config": {"np": args.np_list, "global_batches": args.batch_list, "steps": args.steps,
                   "warmup": args.warmup, "repeats": args.repeats, "seed": args.seed,
                   "timeout_s": args.timeout, "onednn_option": args.onednn,
                   "threads_per_instance": "intra-op max(1, cores // np), inter-op 2"},
        "batches": batches,
        "goal_met_at_every_batch": all(b["goal"]["met"] for b in batches.values()),
        "machine": stack_machine_info(load_before, onednn),
        "code": {**code_before, "sources_changed_during_run":
                 code_version()["popdist_launcher_sources_sha256"]
                 != code_before["popdist_launcher_sources_sha256"]},
        "total_wall_s": time.perf_counter() - started,
    }
    machine = report["machine"]
    title = (f"{args.steps} timed steps after {args.warmup}, median of {args.repeats}; "
             f"{machine['logical_cpus']} CPUs ({machine['cpu_model']}: "
             f"{' '.join(machine['cpu_flags'])}; oneDNN kernels {'/'.join(onednn)}), "
             f"Python {machine['python']}, TensorFlow {machine['tensorflow']}; shared machine")

    def show() -> None:
        for batch, result in batches.items():
            print_table(result["variants"], result["ratios"], result["goal"], args.np_list,
                        int(batch))

    return finish(report, args.out, lambda png: plot(batches, args.np_list, png, title), show,
                  wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
