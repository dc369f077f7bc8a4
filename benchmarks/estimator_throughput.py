"""Training throughput of the IPUEstimator against a plain tf.estimator.Estimator, and its scaling.

What it measures
----------------
Steps/s and samples/s of examples/cnn_estimator.py's CNN (conv 3x3x32 - conv 3x3x64 - maxpool -
dense 128 - dense 10, MomentumOptimizer 0.9) training on the 8x8 digits data, with the same
global batch (default 32), data, input_fn and optimizer everywhere. Configurations, side by side
in one run:

================  ====================================================  =========================
name              what                                                  started by
================  ====================================================  =========================
plain             tf.estimator.Estimator, plain EstimatorSpec and        python (one process)
                  MomentumOptimizer, one step per Session.run
ipl1, ipl10,      IPUEstimator (PopDistStrategy, CrossReplicaOptimizer)  poprun-lite -np 1
ipl100            with iterations_per_loop 1, 10, 100
ipl100-np2,       IPUEstimator, iterations_per_loop 100, the global      poprun-lite -np 2, -np 4
ipl100-np4        batch split over the instances
ceiling           the same layers, loss and optimizer in a bare           python (one process)
                  tf.function running 100 steps per call over the same
                  dataset: no estimator, session or hook
================  ====================================================  =========================

(``ipl100`` is also the -np 1 point of the scaling curve.) Goals: iterations_per_loop 100 reaches
at least 1.5x the steps/s of the plain Estimator on this small model, and at least 0.95x the
ceiling (what the model's own compute and input pipeline allow).

How
---
Every launch runs benchmarks/_estimator_worker.py, which makes ONE ``train()`` call of ``--steps``
steps (``--scaling-steps`` at -np > 1; rounded up to whole Session.runs). Timing uses a
SessionRunHook: it notes the wall clock after every Session.run, and throughput = steps run between
the end of the FIRST Session.run and the end of the LAST one / that time. Graph building, session
creation, the first run (which also fills the input pipeline) and the final checkpoint (written when
the session closes) are therefore excluded; only steady-state training is timed. The hook is the
first of the train() hooks, so a full cycle of every hook (e.g. the IPUEstimator's stop-at-step
hook) is inside each timed interval. Summaries and step-count logging are off and a checkpoint is
written only at the end, for every configuration. Each instance uses ``max(1, cores // np)``
intra-op threads and 2 inter-op threads.

Every configuration is launched ``--repeats`` times, interleaved: each round runs every
configuration once, in an order rotated from round to round, so slow phases of a shared machine
spread over all of them; the median over repeats is reported. Two more numbers help tell real
gaps from noise: ``median_window`` throughput (the timed steps cut into consecutive windows of
``--window-steps``, default the largest iterations_per_loop, i.e. one Session.run of ipl100 or 100
of the plain Estimator: window steps / the median window's time, which bursts of load from other
jobs barely move and which compares the same amount of work everywhere) and ``paired`` ratios
(median over rounds of the ratio between launches of the same round). ``cpu_ms_per_step`` is
instance 0's CPU time (all threads) per step in the timed window: the work a step costs, whatever
else runs on the machine.

Scaling keeps the global batch fixed, so ideal is steps/s proportional to -np: efficiency =
steps/s(N) / (N x steps/s(1)). A machine caps that: -np 1 already keeps every core busy with its
intra-op threads, so on C cores the speedup can reach at most cores_used(N) / cores_used(1),
where cores_used(N) = min(C, N x intra-op threads) (1 on a 2-core machine);
``efficiency_vs_ceiling`` divides the speedup by that ceiling.

A launch that fails or times out (``--timeout`` per launch: SIGTERM, then SIGKILL, to the
launcher and the processes it started, nothing else) is recorded with its error (the last
telling line of its stderr) and the run goes on. Instances talk over loopback only.

Output: benchmarks/results/estimator_throughput.json (``--out``): per configuration the median
and repeats of steps/s and samples/s, the ratios (ipl100/plain, ipl100/ipl1, ...), scaling
efficiency per -np, the goal check, every launch, and the machine; and a plot next to it (.png).

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/estimator_throughput.py``
(``--steps``, ``--scaling-steps``, ``--repeats``, ``--iterations``, ``--np``, ``--global-batch``,
``--timeout``). The defaults (2 rounds of 6 launches; 1000 steps per launch at -np 1, 500 at -np
2 and 4) take about 10 minutes on 2 cores shared with other jobs (load ~10), most of it spent
starting TensorFlow and building graphs; ``--repeats 3`` takes half as long again.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (ONEDNN_CHOICES, ONEDNN_HELP, TRAINING_LAUNCHER_PREFIXES,  # noqa: E402
                     LaunchStats, dist_version, finish, git_state, launch_env, launch_error,
                     machine_info, run_logged, save_figure, subplots, tool, with_onednn)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_estimator_worker.py")
DEFAULT_OUT = os.path.join(HERE, "results", "estimator_throughput.json")
GOAL_RATIO = 1.5  # iterations_per_loop=100 at least 1.5x the plain Estimator
GOAL_IPL = 100
CEILING_GOAL = 0.95  # iterations_per_loop=100 at least 0.95x the bare tf.function loop


@dataclass(frozen=True)
class Config:
    name: str
    variant: str                 # "ipu" or "plain" (the worker's --variant)
    iterations_per_loop: int
    np: int
    description: str

    @property
    def launcher(self) -> str:
        return "poprun-lite" if self.variant == "ipu" else "python"


@dataclass
class Launch:
    config: str
    round: int
    ok: bool
    wall_s: float
    steps_per_s: Optional[float] = None
    samples_per_s: Optional[float] = None
    median_window_steps_per_s: Optional[float] = None
    cpu_ms_per_step: Optional[float] = None
    timed_steps: Optional[int] = None
    session_runs: Optional[int] = None
    first_run_done_s: Optional[float] = None
    final_loss: Optional[float] = None
    trainable_parameters: Optional[int] = None
    load_1min: Optional[float] = None
    error: Optional[str] = None


@dataclass
class Cell(LaunchStats):
    config: Config
    steps: int
    launches: List[Launch] = field(default_factory=list)


def make_configs(iterations: Sequence[int], nps: Sequence[int]) -> List[Config]:
    configs = [Config("plain", "plain", 1, 1, "tf.estimator.Estimator, 1 step per run")]
    configs += [Config(f"ipl{k}", "ipu", k, 1, f"IPUEstimator, iterations_per_loop {k}, -np 1")
                for k in iterations]
    configs += [Config(f"ipl{GOAL_IPL}-np{n}", "ipu", GOAL_IPL, n,
                       f"IPUEstimator, iterations_per_loop {GOAL_IPL}, -np {n}")
                for n in nps if n != 1]
    configs.append(Config("ceiling", "ceiling", GOAL_IPL, 1,
                          f"bare tf.function loop, {GOAL_IPL} steps per call, no estimator"))
    return configs


def intra_op_threads(np_: int, cores: int) -> int:
    """Intra-op threads of each instance at -np N: the cores shared out, at least one."""
    return max(1, cores // np_)


def cores_used(np_: int, cores: int) -> int:
    """Cores N instances can keep busy with their intra-op threads."""
    return min(cores, np_ * intra_op_threads(np_, cores))


def scaling_name(np_: int) -> str:
    return f"ipl{GOAL_IPL}" if np_ == 1 else f"ipl{GOAL_IPL}-np{np_}"


# ---- launching -------------------------------------------------------------------------------
def command(config: Config, worker_args: List[str], timeout_s: float) -> List[str]:
    if config.launcher == "python":
        return [sys.executable, WORKER, *worker_args]
    return [tool("poprun-lite", which=False), "-np", str(config.np),
            "--start-timeout", str(timeout_s), "--only-output-from-instance", "0",
            WORKER, *worker_args]


def launch(config: Config, steps: int, round_: int, args: argparse.Namespace) -> Launch:
    """One launch of one configuration, to completion or timeout."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="estimator-throughput-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        worker_args = ["--variant", config.variant, "--result", result_path,
                       "--model-dir", os.path.join(tmp, "model"),
                       "--iterations-per-loop", str(config.iterations_per_loop),
                       "--steps", str(steps), "--global-batch", str(args.global_batch),
                       "--window-steps", str(args.window_steps),
                       "--intra-op-threads", str(intra_op_threads(config.np, cores)),
                       "--inter-op-threads", "2"]
        load = os.getloadavg()[0]
        rc, wall, _ = run_logged(command(config, worker_args, args.timeout), tmp, args.timeout,
                                 with_onednn(launch_env(TRAINING_LAUNCHER_PREFIXES), args.onednn))
        error = launch_error(rc, args.timeout, tmp, result_path)
        if error is not None:
            return Launch(config.name, round_, False, wall, load_1min=load, error=error)
        with open(result_path) as f:
            result = json.load(f)
    return Launch(config.name, round_, True, wall,
                  steps_per_s=result["steps_per_s"], samples_per_s=result["samples_per_s"],
                  median_window_steps_per_s=result["median_window_steps_per_s"],
                  cpu_ms_per_step=1000 * result["cpu_s_per_step"],
                  timed_steps=result["timed_steps"], session_runs=result["session_runs"],
                  first_run_done_s=result["first_run_done_s"], final_loss=result["final_loss"],
                  trainable_parameters=result["trainable_parameters"], load_1min=load)


def steps_for(config: Config, steps: int) -> int:
    """``steps`` rounded up to whole Session.runs, at least 3 of them."""
    per_run = config.iterations_per_loop
    return max(3 * per_run, -(-steps // per_run) * per_run)


def run_all(configs: Sequence[Config], args: argparse.Namespace) -> Dict[str, Cell]:
    cells = {c.name: Cell(c, steps_for(c, args.steps if c.np == 1 else args.scaling_steps))
             for c in configs}
    total, done = len(configs) * args.repeats, 0
    for round_ in range(args.repeats):
        shift = round_ % len(configs)
        for config in list(configs[shift:]) + list(configs[:shift]):
            cell = cells[config.name]
            run = launch(config, cell.steps, round_, args)
            cell.launches.append(run)
            done += 1
            shown = (f"{run.steps_per_s:7.1f} steps/s {run.samples_per_s:7.0f} samples/s "
                     f"(median window {fmt(run.median_window_steps_per_s, '.1f')} steps/s, "
                     f"{run.cpu_ms_per_step:5.2f} CPU ms/step)" if run.ok
                     else f"FAILED: {run.error}")
            print(f"[{done:2d}/{total}] round {round_ + 1} {config.name:11s} {shown}  "
                  f"({run.wall_s:.0f} s, load {run.load_1min:.1f})", flush=True)
    return cells


# ---- summary ---------------------------------------------------------------------------------
METRICS = ("steps_per_s", "samples_per_s", "median_window_steps_per_s", "cpu_ms_per_step")


def summarize(cells: Dict[str, Cell]) -> Dict[str, Any]:
    out = {}
    for name, cell in cells.items():
        c = cell.config
        entry: Dict[str, Any] = {"description": c.description, "launcher": c.launcher,
                                 "variant": c.variant, "iterations_per_loop": c.iterations_per_loop,
                                 "np": c.np, "steps_per_train_call": cell.steps}
        for metric in METRICS:
            entry[f"{metric}_median"] = cell.median(metric)
            entry[f"{metric}_repeats"] = cell.values(metric)
        values = cell.values("steps_per_s")
        entry["spread"] = ((max(values) - min(values)) / statistics.median(values)
                           if len(values) > 1 else None)
        entry["final_loss"] = cell.values("final_loss")
        entry["trainable_parameters"] = sorted(set(cell.values("trainable_parameters")))
        entry["errors"] = [r.error for r in cell.launches if not r.ok]
        out[name] = entry
    return out


def ratio(per_config: Dict[str, Any], num: str, den: str, metric: str) -> Optional[float]:
    if num not in per_config or den not in per_config:
        return None
    a, b = per_config[num][f"{metric}_median"], per_config[den][f"{metric}_median"]
    return a / b if a is not None and b else None


def paired_ratio(cells: Dict[str, Cell], num: str, den: str) -> Optional[float]:
    """Median over rounds of num/den steps/s between launches of the same round."""
    if num not in cells or den not in cells:
        return None
    by_round = {r.round: r.steps_per_s for r in cells[den].launches if r.ok}
    values = [r.steps_per_s / by_round[r.round] for r in cells[num].launches
              if r.ok and r.round in by_round]
    return statistics.median(values) if values else None


def ratios_and_goal(per_config: Dict[str, Any], cells: Dict[str, Cell],
                    iterations: Sequence[int], nps: Sequence[int]) -> Dict[str, Any]:
    pairs = {f"ipl{k}/plain": (f"ipl{k}", "plain") for k in iterations}
    pairs.update({f"ipl{k}/ipl1": (f"ipl{k}", "ipl1") for k in iterations if k != 1})
    pairs[f"ipl{GOAL_IPL}/ceiling"] = (f"ipl{GOAL_IPL}", "ceiling")
    pairs["plain/ceiling"] = ("plain", "ceiling")
    ratios: Dict[str, Any] = {}
    for key, (num, den) in pairs.items():
        ratios[key] = {"steps_per_s": ratio(per_config, num, den, "steps_per_s"),
                       "median_window": ratio(per_config, num, den,
                                              "median_window_steps_per_s"),
                       "paired": paired_ratio(cells, num, den),
                       "cpu_per_step": ratio(per_config, num, den, "cpu_ms_per_step")}
    cores = os.cpu_count() or 1
    base = per_config.get(scaling_name(1), {}).get("steps_per_s_median")
    scaling: Dict[str, Any] = {}
    for n in nps:
        value = per_config.get(scaling_name(n), {}).get("steps_per_s_median")
        speedup = value / base if value is not None and base else None
        ceiling = cores_used(n, cores) / cores_used(1, cores)
        scaling[str(n)] = {"config": scaling_name(n), "steps_per_s": value, "speedup": speedup,
                           "efficiency": speedup / n if speedup is not None else None,
                           "machine_ceiling_speedup": ceiling,
                           "efficiency_vs_ceiling": (speedup / ceiling
                                                     if speedup is not None else None)}
    key = f"ipl{GOAL_IPL}/plain"
    value = ratios.get(key, {}).get("steps_per_s")
    goal = {"statement": f"iterations_per_loop={GOAL_IPL} at least {GOAL_RATIO}x plain Estimator "
                         f"on this small model",
            "judged_on": "ratio of the median steps/s (ipl100 / plain), -np 1, same global batch",
            "ratio": value,
            "met": value is not None and value >= GOAL_RATIO,
            "met_on_median_window": ((ratios.get(key, {}).get("median_window") or 0)
                                     >= GOAL_RATIO),
            "met_on_paired": (ratios.get(key, {}).get("paired") or 0) >= GOAL_RATIO}
    key = f"ipl{GOAL_IPL}/ceiling"
    value = ratios.get(key, {}).get("steps_per_s")
    ceiling_goal = {
        "statement": f"iterations_per_loop={GOAL_IPL} at least {CEILING_GOAL}x the bare "
                     f"tf.function loop of the same model",
        "judged_on": "ratio of the median steps/s (ipl100 / ceiling), -np 1, same global batch",
        "ratio": value, "met": value is not None and value >= CEILING_GOAL,
        "met_on_median_window": (ratios.get(key, {}).get("median_window") or 0) >= CEILING_GOAL,
        "met_on_paired": (ratios.get(key, {}).get("paired") or 0) >= CEILING_GOAL}
    return {"ratios": ratios, "scaling": scaling, "goal": goal, "ceiling_goal": ceiling_goal}


# ---- report ----------------------------------------------------------------------------------
def fmt(value: Optional[float], spec: str) -> str:
    """``value`` formatted with ``spec``; "-" (as wide as spec says) when there is none."""
    if value is not None:
        return format(value, spec)
    width = spec.split(".")[0]
    return "-".rjust(int(width)) if width.isdigit() else "-"


def print_table(per_config: Dict[str, Any], summary: Dict[str, Any]) -> None:
    print(f"\n{'configuration':14s}{'steps/s':>9s}{'samples/s':>11s}{'med-window':>12s}"
          f"{'CPU ms/step':>13s}{'spread':>8s}  repeats (steps/s)")
    for name, e in per_config.items():
        repeats = ", ".join(f"{v:.1f}" for v in e["steps_per_s_repeats"])
        failed = f"  {len(e['errors'])} failed" if e["errors"] else ""
        print(f"{name:14s}{fmt(e['steps_per_s_median'], '9.1f')}"
              f"{fmt(e['samples_per_s_median'], '11.0f')}"
              f"{fmt(e['median_window_steps_per_s_median'], '12.1f')}"
              f"{fmt(e['cpu_ms_per_step_median'], '13.2f')}{fmt(e['spread'], '8.2f')}"
              f"  {repeats}{failed}")
    print("\nratio        steps/s  med-window  paired  CPU/step")
    for key, r in summary["ratios"].items():
        print(f"{key:12s}{fmt(r['steps_per_s'], '8.2f')}{fmt(r['median_window'], '12.2f')}"
              f"{fmt(r['paired'], '8.2f')}{fmt(r['cpu_per_step'], '10.2f')}")
    print(f"\nscaling, ipl{GOAL_IPL}, fixed global batch")
    print("  -np  steps/s  speedup  efficiency  machine ceiling  efficiency vs ceiling")
    for n, sc in summary["scaling"].items():
        print(f"{n:>5s}{fmt(sc['steps_per_s'], '9.1f')}{fmt(sc['speedup'], '9.2f')}"
              f"{fmt(sc['efficiency'], '12.2f')}{sc['machine_ceiling_speedup']:17.2f}"
              f"{fmt(sc['efficiency_vs_ceiling'], '23.2f')}")
    goal = summary["goal"]
    for goal in (summary["goal"], summary["ceiling_goal"]):
        print(f"\ngoal: {goal['statement']}: ratio {fmt(goal['ratio'], '.2f')} -> "
              f"{'MET' if goal['met'] else 'NOT met'} (median window: "
              f"{'met' if goal['met_on_median_window'] else 'not met'}, paired: "
              f"{'met' if goal['met_on_paired'] else 'not met'})")


def plot(per_config: Dict[str, Any], summary: Dict[str, Any], nps: Sequence[int], path: str,
         title: str) -> None:
    fig, (ax, sax) = subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    single = [name for name, e in per_config.items() if e["np"] == 1]
    xs = range(len(single))
    colors = [{"plain": "dimgray", "ceiling": "tab:green"}.get(per_config[n]["variant"], "tab:blue")
              for n in single]
    medians = [per_config[n]["steps_per_s_median"] or 0 for n in single]
    ax.bar(xs, medians, color=colors, alpha=0.8, label="steps/s, median of repeats")
    for x, name in zip(xs, single):
        e = per_config[name]
        ax.scatter([x] * len(e["steps_per_s_repeats"]), e["steps_per_s_repeats"], color="black",
                   s=14, zorder=3, label="repeats" if x == 0 else None)
        if e["median_window_steps_per_s_median"] is not None:
            ax.scatter([x], [e["median_window_steps_per_s_median"]], marker="_", s=400,
                       color="tab:red", zorder=3,
                       label="median window (noise-robust)" if x == 0 else None)
        label = (f"{e['steps_per_s_median']:.0f} steps/s\n{e['samples_per_s_median']:.0f} "
                 f"samples/s\n{e['cpu_ms_per_step_median']:.2f} CPU ms/step"
                 if e["steps_per_s_median"] else "failed:\n" + "\n".join(
                     err[:30] for err in e["errors"][:1]))
        ax.text(x, medians[x] / 2 if medians[x] else 1, label, ha="center", va="center",
                fontsize=8, color="white" if medians[x] else "black")
    plain = per_config.get("plain", {}).get("steps_per_s_median")
    if plain:
        ax.axhline(GOAL_RATIO * plain, color="green", linestyle="--",
                   label=f"goal for ipl{GOAL_IPL}: {GOAL_RATIO}x plain")
    goal = summary["goal"]
    ax.set_xticks(list(xs), [n if n in ("plain", "ceiling") else f"IPUEstimator\n{n}"
                             for n in single])
    ax.set_ylabel("training steps/s (global batch fixed)")
    ax.set_ylim(0, max([v for n in single for v in per_config[n]["steps_per_s_repeats"]]
                       + medians + [GOAL_RATIO * (plain or 0)]) * 1.25 or 1)
    ax.set_title(f"-np 1: ipl{GOAL_IPL}/plain = {fmt(goal['ratio'], '.2f')}x "
                 f"(goal {GOAL_RATIO}x: {'met' if goal['met'] else 'NOT met'})", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)

    scaling = summary["scaling"]
    points = [(n, scaling[str(n)]["steps_per_s"]) for n in nps
              if scaling[str(n)]["steps_per_s"] is not None]
    for n in nps:
        e = per_config.get(scaling_name(n))
        if e:
            sax.scatter([n] * len(e["steps_per_s_repeats"]), e["steps_per_s_repeats"],
                        color="tab:blue", s=12, alpha=0.4)
    if points:
        sax.plot([p[0] for p in points], [p[1] for p in points], "o-", color="tab:blue",
                 label=f"IPUEstimator ipl{GOAL_IPL}, median (faint: repeats)")
        for n, value in points:
            sc = scaling[str(n)]
            sax.annotate(f"{value:.0f} steps/s\nspeedup {sc['speedup']:.2f}\n"
                         f"efficiency {sc['efficiency']:.2f}", (n, value), fontsize=7,
                         xytext=(0, 8), textcoords="offset points",
                         ha="right" if n == nps[-1] else "left")
    base = scaling[str(nps[0])]["steps_per_s"] if nps[0] == 1 else None
    top = max([v for n in nps for v in per_config.get(scaling_name(n), {})
               .get("steps_per_s_repeats", [])] + [base or 0]) * 1.6 or 1
    if base:
        cores = os.cpu_count() or 1
        sax.plot(nps, [base * n for n in nps], ":", color="gray", label="ideal (linear in -np)")
        sax.plot(nps, [base * cores_used(n, cores) / cores_used(1, cores) for n in nps], "--",
                 color="gray", label=f"ceiling on {cores} cores (-np 1 already uses them all)")
    sax.set_xscale("log", base=2)
    sax.set_xlim(nps[0] / 1.25, nps[-1] * 1.25)  # also when every scaling launch failed
    sax.set_xticks(list(nps), [str(n) for n in nps])
    sax.set_xlabel("instances (poprun-lite -np)")
    sax.set_ylabel("training steps/s")
    sax.set_ylim(0, top)
    sax.grid(True, alpha=0.3)
    sax.legend(fontsize=7, loc="upper right")
    sax.set_title(f"Scaling of IPUEstimator ipl{GOAL_IPL}, global batch fixed", fontsize=10)
    save_figure(fig, path, title)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000,
                        help="steps of each -np 1 launch's one train() call (rounded up to "
                             "whole Session.runs)")
    parser.add_argument("--scaling-steps", type=int, default=500,
                        help="the same for the -np 2, 4... launches (several times slower per "
                             "step here)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each launches every "
                                                                "configuration once")
    parser.add_argument("--iterations", default="1,10,100",
                        help="comma-separated iterations_per_loop values at -np 1")
    parser.add_argument("--np", default="1,2,4", help="comma-separated -np for the scaling runs")
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--window-steps", type=int, default=None,
                        help="steps per window of the median-window throughput (default: the "
                             "largest --iterations; must be a multiple of each)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per launch")
    parser.add_argument("--onednn", choices=ONEDNN_CHOICES, default="default", help=ONEDNN_HELP)
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON result; the plot goes next to it")
    args = parser.parse_args(argv)
    args.iteration_list = sorted({int(k) for k in args.iterations.split(",") if k.strip()})
    args.np_list = sorted({int(n) for n in args.np.split(",") if n.strip()} | {1})
    if GOAL_IPL not in args.iteration_list:
        parser.error(f"--iterations must include {GOAL_IPL} (the goal and the scaling use it)")
    if any(k < 1 for k in args.iteration_list) or any(n < 1 for n in args.np_list):
        parser.error("iterations and -np must be positive")
    if args.window_steps is None:
        args.window_steps = max(args.iteration_list)
    if any(args.window_steps % k for k in args.iteration_list):
        parser.error(f"--window-steps {args.window_steps} must be a multiple of every "
                     f"iterations_per_loop")
    bad = [n for n in args.np_list if args.global_batch % n]
    if bad:
        parser.error(f"--global-batch {args.global_batch} must split evenly over -np {bad}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    configs = make_configs(args.iteration_list, args.np_list)
    load_before = os.getloadavg()
    started = time.perf_counter()
    cells = run_all(configs, args)
    per_config = summarize(cells)
    summary = ratios_and_goal(per_config, cells, args.iteration_list, args.np_list)
    report = {
        "benchmark": "estimator_throughput",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "what": ("training steps/s and samples/s of examples/cnn_estimator.py's CNN on digits: "
                 "IPUEstimator at several iterations_per_loop and -np vs a plain "
                 "tf.estimator.Estimator"),
        "method": ("one train() call per launch; wall clock between the end of the first and the "
                   "end of the last Session.run (SessionRunHook), so graph building, session "
                   "creation, the first run and the final checkpoint are excluded; median over "
                   "repeats interleaved in rotated order"),
        "settings": {"steps": args.steps, "scaling_steps": args.scaling_steps,
                     "window_steps": args.window_steps,
                     "repeats": args.repeats,
                     "global_batch": args.global_batch, "iterations_per_loop": args.iteration_list,
                     "np": args.np_list, "timeout_s": args.timeout, "learning_rate": 0.05,
                     "optimizer": "MomentumOptimizer(momentum=0.9) (IPUEstimator: inside "
                                  "CrossReplicaOptimizer)",
                     "threads_per_instance": "intra-op max(1, cores // np), inter-op 2",
                     "summaries": "off", "checkpoints": "at the end only",
                     "onednn": args.onednn},
        "configurations": per_config,
        **summary,
        "launches": [asdict(run) for cell in cells.values() for run in cell.launches],
        "machine": machine_info(load_before, {
            "tensorflow": dist_version("tensorflow-cpu", "tensorflow"),
            "tensorflow_estimator": dist_version("tensorflow-estimator"),
            "horovod": dist_version("horovod"), **git_state()}),
        "total_wall_s": time.perf_counter() - started,
    }
    title = (f"examples/cnn_estimator.py CNN on digits, global batch {args.global_batch}, "
             f"{args.steps} steps per train() ({args.scaling_steps} at -np > 1; steady state "
             f"timed), median of {args.repeats}; "
             f"{report['machine']['logical_cpus']} CPUs ({report['machine']['cpu_model']}), "
             f"shared machine, load {load_before[0]:.1f} at start")
    return finish(report, args.out, lambda png: plot(per_config, summary, args.np_list, png, title),
                  lambda: print_table(per_config, summary), wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
