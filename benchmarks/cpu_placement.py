"""Training samples/s with and without poprun-lite's CPU placement (thread budget, --bind-to).

What it measures
----------------
The small CNN of ``benchmarks/_throughput_worker.py`` (variant ``popdist``: PopDistStrategy,
Horovod allreduce; global batch 128 split over the instances) under ``poprun-lite -np N`` for
N = 1, 2, 4, in these placements:

==========  =======================================  ========================================
placement   poprun-lite options                      what each instance gets
==========  =======================================  ========================================
off         --no-thread-budget --bind-to none        TensorFlow's defaults: intra-op and
                                                     inter-op pools sized to all the host's CPUs
budget      (the default)                            OMP/intra-op = CPUs // N, inter-op <= 2
core        --bind-to core                           its own block of cores, budget = its CPUs
inter1      -x TF_NUM_INTEROP_THREADS=1 (-np 1 only) the budget with a 1-thread inter-op pool
==========  =======================================  ========================================

The worker leaves TensorFlow's thread settings alone, so the pools follow the environment the
launcher gives. ``inter1`` at -np 1 (budget = all CPUs) checks the inter-op choice: the default
caps the inter-op pool at 2 threads; this row shows what 1 would give.

Each (placement, N) runs ``--repeats`` times, in an order shuffled per round (seeded), and the
median samples/s is reported with its ratio to ``off`` at the same N, and so is the samples/s at
each launch's median step time (less moved by other jobs on a shared machine). Every launch has a
timeout; a failed launch is recorded with its error.

Output: benchmarks/results/cpu_placement.json (``--out``) and a PNG next to it: samples/s
against N per placement, and the ratio to ``off``.

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/cpu_placement.py`` (``--np``,
``--repeats``, ``--steps``, ``--warmup``). The defaults (3 repeats, 10 launches each) take about
8 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (ROOT, TRAINING_LAUNCHER_PREFIXES, finish, git_state,  # noqa: E402
                     launch_env, launch_error, machine_info, run_logged, save_figure, subplots)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_throughput_worker.py")
PLACEMENTS = {
    "off": ["--no-thread-budget", "--bind-to", "none"],
    "budget": [],
    "core": ["--bind-to", "core"],
    "inter1": ["-x", "TF_NUM_INTEROP_THREADS=1"],
}
TIMEOUT_S = 300.0


def launch(placement: str, np_: int, args: argparse.Namespace) -> Dict[str, Any]:
    """One poprun-lite run; its samples/s, or its error."""
    with tempfile.TemporaryDirectory(prefix="cpu-placement-") as workdir:
        result_path = os.path.join(workdir, "result.json")
        argv = [sys.executable, "-m", "popdist_launcher", "-np", str(np_),
                "--report-bindings", *PLACEMENTS[placement], WORKER, "--variant", "popdist",
                "--result", result_path, "--steps", str(args.steps), "--warmup",
                str(args.warmup), "--global-batch", str(args.global_batch)]
        env = launch_env(TRAINING_LAUNCHER_PREFIXES)
        for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            env.pop(name, None)
        env["PYTHONPATH"] = ROOT
        rc, seconds, _ = run_logged(argv, workdir, TIMEOUT_S, env)
        error = launch_error(rc, TIMEOUT_S, workdir, result_path)
        with open(os.path.join(workdir, "stderr"), errors="replace") as f:
            bindings = [line.split("<stderr>:", 1)[1].strip() for line in f
                        if "poprun-lite: instance" in line]
        run: Dict[str, Any] = {"placement": placement, "np": np_, "ok": error is None,
                               "wall_s": round(seconds, 2), "bindings": sorted(bindings),
                               "loadavg": list(os.getloadavg())}
        if error is not None:
            run["error"] = error
            return run
        with open(result_path) as f:
            result = json.load(f)
        run["samples_per_s"] = result["samples_per_s"]
        run["median_step_s"] = result["median_step_s"]
        return run


def summarise(runs: List[Dict[str, Any]], nps: List[int],
              args: argparse.Namespace) -> Dict[str, Any]:
    """Per -np and placement: the median samples/s over the repeats, samples/s at the median
    step time (which bursts of other jobs' load barely move), and both as ratios to ``off``."""
    table: Dict[str, Any] = {}
    for np_ in nps:
        row: Dict[str, Any] = {}
        for placement in PLACEMENTS:
            done = [r for r in runs
                    if r["ok"] and r["np"] == np_ and r["placement"] == placement]
            if done:
                values = [r["samples_per_s"] for r in done]
                steady = [args.global_batch / r["median_step_s"] for r in done]
                row[placement] = {"median_samples_per_s": round(statistics.median(values), 1),
                                  "median_step_samples_per_s": round(statistics.median(steady), 1),
                                  "runs": [round(v, 1) for v in values]}
        off = row.get("off")
        for entry in row.values():
            if off:
                entry["ratio_to_off"] = round(
                    entry["median_samples_per_s"] / off["median_samples_per_s"], 3)
                entry["median_step_ratio_to_off"] = round(
                    entry["median_step_samples_per_s"] / off["median_step_samples_per_s"], 3)
        table[str(np_)] = row
    return table


def draw(table: Dict[str, Any], png: str) -> None:
    fig, (left, right) = subplots(1, 2, figsize=(10, 4))
    for placement in PLACEMENTS:
        points = [(int(n), row[placement]) for n, row in table.items() if placement in row]
        if not points:
            continue
        xs = [n for n, _ in points]
        left.plot(xs, [e["median_samples_per_s"] for _, e in points], marker="o",
                  label=placement)
        right.plot(xs, [e.get("ratio_to_off", float("nan")) for _, e in points], marker="o",
                   label=placement)
    left.set_xlabel("instances (-np)")
    left.set_ylabel("samples/s (median)")
    right.set_xlabel("instances (-np)")
    right.set_ylabel("ratio to --no-thread-budget --bind-to none")
    right.axhline(1.0, color="grey", linewidth=0.8)
    for axis in (left, right):
        axis.set_xticks([int(n) for n in table])
        axis.legend(fontsize=8)
    save_figure(fig, png, f"CPU placement: small CNN, PopDistStrategy, {os.cpu_count()} CPUs")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cpu_placement.json"))
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    started = time.perf_counter()
    order = random.Random(args.seed)
    runs: List[Dict[str, Any]] = []
    for round_ in range(args.repeats):
        jobs = [(p, n) for n in args.np for p in PLACEMENTS if p != "inter1" or n == 1]
        order.shuffle(jobs)
        for placement, np_ in jobs:
            run = launch(placement, np_, args)
            run["round"] = round_
            runs.append(run)
            shown = f"{run['samples_per_s']:.0f} samples/s" if run["ok"] else run["error"]
            print(f"round {round_} -np {np_} {placement}: {shown}", flush=True)
    table = summarise(runs, args.np, args)
    report = {"benchmark": "cpu_placement", "machine": machine_info(load_before, {}),
              "code": git_state(), "settings": vars(args), "placements": PLACEMENTS,
              "results": table, "runs": runs}

    def show() -> None:
        print(f"\n{'np':>3} " + " ".join(f"{p:>16}" for p in PLACEMENTS))
        for n, row in table.items():
            cells = [f"{row[p]['median_samples_per_s']:8.0f} ({row[p].get('ratio_to_off', 0):.2f}x)"
                     if p in row else "" for p in PLACEMENTS]
            print(f"{n:>3} " + " ".join(f"{c:>16}" for c in cells))

    return finish(report, args.out, lambda png: draw(table, png), show,
                  wall_s=time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
