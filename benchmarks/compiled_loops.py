"""Speed of Graphcore-style compiled training loops (``tf.function(jit_compile=True)``) under the
IPU layer against the same loops written without ``jit_compile``, and what XLA itself costs on a
CPU.

What it measures
----------------
Steps/s of a small CNN (conv 3x3x32 - conv 3x3x64 - maxpool - dense 128 - dense 10, SGD with
momentum, batch 32 of 8x8x1 images, the same initial weights everywhere) trained in one process,
``--steps-per-call`` steps per call of the loop function. Configurations, side by side in one run:

======================  ===========================================================================
name                    loop
======================  ===========================================================================
ipu-iterator-jit        IPUStrategy; ``@tf.function(jit_compile=True)`` around
                        ``for _ in tf.range(n): strategy.run(step, args=next(iterator))``
                        (Graphcore's TF2 guide)
ipu-iterator-nojit      the same without ``jit_compile``
ipu-infeed-jit          IPUStrategy; ``strategy.run`` of a jit-compiled function running
                        ``ipu.loops.repeat(n, body, infeed_queue=...)``, the body enqueuing the loss
                        to an IPUOutfeedQueue, dequeued after every call
ipu-infeed-nojit        the same without ``jit_compile``
stock-step-xla          no IPU layer: a jit-compiled training step (XLA compiles it, no host op
                        inside) called n times from Python
stock-step-nojit        the same step without ``jit_compile``
======================  ===========================================================================

Goal (issue 17): a compiled loop that the IPU layer runs is not slower than the same loop written
without ``jit_compile`` (ratio jit/nojit >= 0.97, the noise of this machine). The stock pair shows
why the IPU layer runs such loops without XLA on a CPU. ``final_loss`` of every non-XLA
configuration must be identical (the same maths); XLA's differs in rounding.

How
---
Every launch runs benchmarks/_compiled_loop_worker.py as a fresh ``python`` process: untimed
``--warmup-calls`` (tracing and the first call), then ``--calls`` timed calls. steps/s = timed steps
/ wall time of the timed calls; ``median_call`` = steps per call / the median call's time;
``cpu_ms_per_step`` = the process's CPU time per timed step. Each configuration is launched
``--repeats`` times, in rounds rotated from round to round; medians over repeats are reported.

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/compiled_loops.py``
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (HERE, dist_version, finish, git_state, launch_env,  # noqa: E402
                     machine_info, save_figure, subplots)

VARIANTS = ("ipu-iterator-jit", "ipu-iterator-nojit", "ipu-infeed-jit", "ipu-infeed-nojit",
            "stock-step-xla", "stock-step-nojit")
PAIRS = (("ipu-iterator-jit", "ipu-iterator-nojit"), ("ipu-infeed-jit", "ipu-infeed-nojit"),
         ("stock-step-xla", "stock-step-nojit"))
DEFAULT_OUT = os.path.join(HERE, "results", "compiled_loops.json")
GOAL = 0.97


def launch(variant: str, args: argparse.Namespace, workdir: str) -> Dict[str, Any]:
    out = os.path.join(workdir, f"{variant}-{time.monotonic_ns()}.json")
    argv = [sys.executable, os.path.join(HERE, "_compiled_loop_worker.py"), variant, out,
            "--steps-per-call", str(args.steps_per_call), "--calls", str(args.calls),
            "--warmup-calls", str(args.warmup_calls)]
    try:
        done = subprocess.run(argv, env=launch_env(), capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "error": f"timed out after {args.timeout:.0f} s"}
    if done.returncode != 0 or not os.path.exists(out):
        lines = [line for line in done.stderr.splitlines() if "Error" in line] or \
            done.stderr.splitlines()[-1:]
        return {"variant": variant, "error": lines[-1] if lines else f"exit {done.returncode}"}
    with open(out) as f:
        return json.load(f)


def summarise(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    summary = {}
    for variant in VARIANTS:
        ok = [r for r in runs if r["variant"] == variant and "error" not in r]
        if not ok:
            continue
        summary[variant] = {
            key: statistics.median(r[key] for r in ok)
            for key in ("steps_per_s", "median_call_steps_per_s", "cpu_ms_per_step")}
        summary[variant]["runs_steps_per_s"] = [round(r["steps_per_s"], 1) for r in ok]
        summary[variant]["final_loss"] = ok[0]["last_loss"]
    return summary


def ratios(summary: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    out = {}
    for a, b in PAIRS:
        if a in summary and b in summary:
            out[f"{a}/{b}"] = {
                "steps_per_s": summary[a]["steps_per_s"] / summary[b]["steps_per_s"],
                "median_call": summary[a]["median_call_steps_per_s"]
                / summary[b]["median_call_steps_per_s"],
                "cpu_per_step": summary[a]["cpu_ms_per_step"] / summary[b]["cpu_ms_per_step"]}
    return out


def plot(summary: Dict[str, Dict[str, Any]], png: str, title: str) -> None:
    fig, ax = subplots(figsize=(7.5, 3.6))
    names = [v for v in VARIANTS if v in summary]
    values = [summary[v]["steps_per_s"] for v in names]
    colours = ["tab:blue" if v.endswith(("jit", "xla")) and not v.endswith("nojit") else "tab:gray"
               for v in names]
    ax.barh(names, values, color=colours)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.0f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("training steps/s (median over repeats; blue: jit_compile=True)")
    save_figure(fig, png, title)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-call", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per launch")
    parser.add_argument("--warmup-calls", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="launches per configuration")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated configurations to run (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per launch")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON result; the plot goes next to it")
    args = parser.parse_args()
    chosen = tuple(v for v in args.variants.split(",") if v)
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(VARIANTS)}")
    load_before, started = os.getloadavg(), time.time()
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="compiled-loops-") as workdir:
        for round_index in range(args.repeats):
            shift = round_index % len(chosen)
            for variant in chosen[shift:] + chosen[:shift]:
                run = launch(variant, args, workdir)
                run["round"] = round_index + 1
                runs.append(run)
                shown = run.get("error") or f"{run['steps_per_s']:8.1f} steps/s"
                print(f"[{len(runs):2d}/{args.repeats * len(chosen)}] round {round_index + 1} "
                      f"{variant:20s} {shown}", flush=True)
    summary = summarise(runs)
    pair_ratios = ratios(summary)
    ipu_pairs = [k for k in pair_ratios if k.startswith("ipu")]
    met = bool(ipu_pairs) and all(pair_ratios[k]["steps_per_s"] >= GOAL for k in ipu_pairs)
    plain_losses = {summary[v]["final_loss"] for v in summary if not v.endswith("xla")}
    report = {
        "benchmark": "compiled_loops",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {k: getattr(args, k) for k in ("steps_per_call", "calls", "warmup_calls",
                                                 "repeats", "variants")},
        "variants": summary, "ratios": pair_ratios,
        "goal": {"what": f"jit/nojit steps/s >= {GOAL} for every IPU-layer loop", "met": met},
        "same_final_loss_without_xla": len(plain_losses) == 1,
        "launches": runs,
        "machine": machine_info(load_before, {"tensorflow": dist_version("tensorflow"),
                                              **git_state()}),
        "total_wall_s": round(time.time() - started, 1)}

    def show() -> None:
        print("\nconfiguration          steps/s  median-call  CPU ms/step  runs")
        for variant, row in summary.items():
            print(f"{variant:22s} {row['steps_per_s']:8.1f} {row['median_call_steps_per_s']:11.1f} "
                  f"{row['cpu_ms_per_step']:11.2f}  {row['runs_steps_per_s']}")
        print("\nratio                                   steps/s  median-call  CPU/step")
        for name, row in pair_ratios.items():
            print(f"{name:40s} {row['steps_per_s']:6.2f} {row['median_call']:11.2f} "
                  f"{row['cpu_per_step']:9.2f}")
        print(f"\ngoal ({report['goal']['what']}): {'met' if met else 'NOT met'}; the same final "
              f"loss without XLA: {report['same_final_loss_without_xla']}")

    title = f"compiled loops, {args.steps_per_call} steps per call, batch 32"
    return finish(report, args.out, lambda png: plot(summary, png, title), show,
                  wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
