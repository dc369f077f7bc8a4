"""Our Horovod-based strategies against plain Horovod in the same processes, taking turns.

What it measures
----------------
training_throughput.py starts every variant as a job of its own, so a machine whose speed drifts
from minute to minute (a shared or virtual one) moves each launch by 10-20% and hides any gap
smaller than that. Here one poprun-lite job per -np holds all of ``--variants`` (plain Horovod,
PopDistStrategy, IPUHorovodStrategy: the same small CNN, data, seed and custom loops as
training_throughput.py, built side by side in each instance) and times them in turns: after each
one's warm-up, ``--steps`` timed steps of each in ``--blocks`` blocks, block by block, in an
order reversed every other block. Each block of ours is compared with the block of plain Horovod
next to it in time, so drift cancels; the ratio reported is the median of those block ratios
(samples/s ours / plain) with their range, and the CPU time per step ratio the same way. The
last losses of all variants must agree (every variant trains the same steps on the same data from
the same weights: a check that the comparison is fair), and so must their trained weights (sum of
squares). Goal: at least 0.97x at every -np and batch.

``--path fit`` times the same engines under Keras ``model.fit`` instead: plain Horovod with its
Keras ``DistributedOptimizer`` and ``BroadcastGlobalVariablesCallback``, the strategies with the
model compiled under ``strategy.scope()``; each block is one ``fit`` of that many steps, timed
from its first batch's start to its last batch's end. There the logged losses differ at -np > 1
(Horovod's Keras loss is instance 0's own, a strategy's the mean over all replicas); the weights
must still agree.

What it does not measure: plain Horovod here runs under poprun-lite, not horovodrun, with the
same Horovod build and transport as ours; training_throughput.py compares the launchers' whole
jobs side by side.

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/turns_throughput.py`` (``--path``,
``--np``, ``--global-batch``, ``--steps``, ``--blocks``, ``--repeats``, ``--onednn``). Output:
benchmarks/results/turns_throughput.json (``turns_throughput_fit.json`` for ``--path fit``) and a
chart next to it (.png). Every launch has a timeout (the launcher's process group is stopped:
SIGTERM, then SIGKILL); loopback only.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (ONEDNN_CHOICES, ONEDNN_HELP, finish, save_figure,  # noqa: E402
                     stack_machine_info, subplots, tool)
from training_throughput import GOAL, code_version, run_worker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_throughput_worker.py")
RESULTS = os.path.join(HERE, "results")
FIT_SUFFIX = "-fit"  # the worker's name of an engine under Keras fit
PLAIN = "horovod"
OURS = ("popdist", "ipu-horovod")


def launch(np_: int, global_batch: int, args: argparse.Namespace) -> Dict[str, Any]:
    """One job holding every variant at ``np_`` instances: instance 0's result, or an error."""
    with tempfile.TemporaryDirectory(prefix="turns-") as tmp:
        run = run_worker(
            [tool("poprun-lite", which=False), "-np", str(np_), "--start-timeout",
             str(args.timeout), WORKER], np_,
            ["--variant", ",".join(worker_variant(v, args.path) for v in args.variant_list),
             "--global-batch", str(global_batch),
             "--steps", str(args.steps), "--blocks", str(args.blocks),
             "--warmup", str(args.warmup), "--seed", str(args.seed)], args, tmp)
    about = {"np": np_, "ok": run.result is not None, "wall_s": run.wall_s,
             "load_1min": run.load_1min, "stray_processes": run.stray_processes}
    if run.result is None:
        return {**about, "error": run.error}
    result = dict(run.result)
    for key in ("blocks", "final_loss_instance0", "weights_digest_instance0"):
        result[key] = {name.removesuffix(FIT_SUFFIX): value for name, value in result[key].items()}
    return {**about, **result}


def worker_variant(engine: str, path: str) -> str:
    """The worker's variant for ``engine`` (horovod, popdist, ipu-horovod) on ``path``."""
    return engine + FIT_SUFFIX if path == "fit" else engine


def max_difference(values: Dict[str, float], relative: bool = False) -> float:
    spread = max(values.values()) - min(values.values())
    return spread / max(abs(v) for v in values.values()) if relative else spread


def block_ratios(runs: Sequence[Dict[str, Any]], ours: str, key: str) -> List[float]:
    """Ours / plain block by block over every successful run (``cpu_ms_per_step``: plain / ours,
    so above 1 means ours costs less)."""
    ratios = []
    for run in runs:
        if not run["ok"]:
            continue
        mine, plain = run["blocks"][ours][key], run["blocks"][PLAIN][key]
        ratios += [m / p if key == "samples_per_s" else p / m for m, p in zip(mine, plain)]
    return ratios


def summarize(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Per variant of ours: median block ratios and their range, samples/s medians, losses."""
    good = [run for run in runs if run["ok"]]
    out: Dict[str, Any] = {"launches_ok": len(good), "launches_failed": len(runs) - len(good),
                           "errors": [run["error"] for run in runs if not run["ok"]]}
    if not good:
        return out
    for name in good[0]["blocks"]:
        speeds = [s for run in good for s in run["blocks"][name]["samples_per_s"]]
        out[f"{name}_samples_per_s_median"] = statistics.median(speeds)
    for ours in OURS:
        if ours not in good[0]["blocks"]:
            continue
        ratios = block_ratios(good, ours, "samples_per_s")
        cpu = block_ratios(good, ours, "cpu_ms_per_step")
        out[f"{ours}/{PLAIN}"] = {
            "median": statistics.median(ratios), "range": [min(ratios), max(ratios)],
            "quartiles": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3,
            "blocks": len(ratios), "cpu_per_step_median": statistics.median(cpu)}
    out["final_loss_max_difference_between_variants"] = max(
        max_difference(run["final_loss_instance0"]) for run in good)
    out["weights_digest_max_relative_difference_between_variants"] = max(
        max_difference(run["weights_digest_instance0"], relative=True) for run in good)
    return out


def print_table(batches: Dict[str, Any], nps: Sequence[int]) -> None:
    for batch, by_np in batches.items():
        print(f"\nglobal batch {batch}: ours / plain Horovod, median over blocks taken in turns "
              f"(range; CPU per step plain/ours)")
        print("".ljust(26) + "".join(f"-np {n}".rjust(26) for n in nps))
        for ours in OURS:
            cells = []
            for n in nps:
                cell = by_np[str(n)].get(f"{ours}/{PLAIN}")
                cells.append("failed" if cell is None else
                             f"{cell['median']:.3f}{'' if cell['median'] >= GOAL else '!'} "
                             f"({cell['range'][0]:.2f}-{cell['range'][1]:.2f}; "
                             f"{cell['cpu_per_step_median']:.2f})")
            print(f"{ours}/{PLAIN}".ljust(26) + "".join(c.rjust(26) for c in cells))


def plot(batches: Dict[str, Any], nps: Sequence[int], path: str, title: str) -> None:
    fig, axes = subplots(1, len(batches), figsize=(5.5 * len(batches), 4), squeeze=False)
    for ax, (batch, by_np) in zip(axes[0], batches.items()):
        for offset, ours in zip((-0.08, 0.08), OURS):
            xs, medians, low, high = [], [], [], []
            for n in nps:
                cell = by_np[str(n)].get(f"{ours}/{PLAIN}")
                if cell is None:
                    continue
                xs.append(n * (1 + offset))
                medians.append(cell["median"])
                low.append(cell["median"] - cell["quartiles"][0])
                high.append(cell["quartiles"][2] - cell["median"])
            if xs:  # a point whose job failed has no ratio
                ax.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=4,
                            label=f"{ours} / plain Horovod")
        ax.axhline(GOAL, color="red", linestyle="--", linewidth=1, label=f"goal {GOAL}")
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(nps) * 0.8, max(nps) * 1.25)
        ax.set_xticks(list(nps), [str(n) for n in nps])
        ax.set_xlabel("-np (instances)")
        ax.set_ylabel("samples/s ratio (median block; bars: quartiles)")
        ax.set_title(f"global batch {batch}")
        ax.legend(fontsize=8)
    save_figure(fig, path, title)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("loop", "fit"), default="loop",
                        help="custom training loops, or Keras model.fit")
    parser.add_argument("--np", default="1,2,4", help="comma-separated instance counts")
    parser.add_argument("--variants", default=",".join((PLAIN, *OURS)),
                        help=f"{PLAIN} and one or both of {', '.join(OURS)}")
    parser.add_argument("--global-batch", default="128,1024",
                        help="comma-separated global batches (small: per-step overhead; large: "
                             "compute)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per variant and job")
    parser.add_argument("--blocks", type=int, default=10, help="turns per variant and job")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    parser.add_argument("--repeats", type=int, default=1, help="jobs per -np and batch")
    parser.add_argument("--onednn", choices=ONEDNN_CHOICES, default="default", help=ONEDNN_HELP)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    parser.add_argument("--out", default=None, help="JSON result; the plot goes next to it "
                        "(default: results/turns_throughput[_fit].json beside this script)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = os.path.join(RESULTS, "turns_throughput_fit.json" if args.path == "fit"
                                else "turns_throughput.json")
    args.np_list = [int(n) for n in args.np.split(",") if n.strip()]
    args.batch_list = [int(b) for b in args.global_batch.split(",") if b.strip()]
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.variant_list[:1] != [PLAIN] or not set(args.variant_list[1:]) <= set(OURS) \
            or len(args.variant_list) < 2 or len(set(args.variant_list)) != len(args.variant_list):
        parser.error(f"--variants must be {PLAIN} followed by one or both of {', '.join(OURS)}, "
                     f"comma-separated; got {args.variants!r}")
    bad = [(b, n) for b in args.batch_list for n in args.np_list if n < 1 or b % n]
    if bad:
        parser.error(f"each --global-batch must split evenly over each -np; not {bad}")
    if not 1 <= args.blocks <= args.steps:
        parser.error(f"--blocks must be between 1 and --steps ({args.steps}); got {args.blocks}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    started = time.perf_counter()
    runs: List[Dict[str, Any]] = []
    batches: Dict[str, Any] = {}
    for batch in args.batch_list:
        by_np = {}
        for np_ in args.np_list:
            mine = []
            for repeat in range(args.repeats):
                run = launch(np_, batch, args)
                run.update(global_batch=batch, repeat=repeat)
                mine.append(run)
                shown = "ok" if run["ok"] else f"FAILED: {run['error']}"
                print(f"batch {batch} -np {np_} job {repeat + 1}/{args.repeats}: {shown} "
                      f"({run['wall_s']:.1f} s)", flush=True)
            runs += mine
            by_np[str(np_)] = summarize(mine)
        batches[str(batch)] = by_np
    checks = [cell[f"{ours}/{PLAIN}"]["median"] >= GOAL for by_np in batches.values()
              for cell in by_np.values() for ours in OURS if f"{ours}/{PLAIN}" in cell]
    onednn = sorted({str(run.get("onednn")) for run in runs if run["ok"]})
    report = {
        "benchmark": "turns_throughput",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "what": ("samples/s ratio ours / plain Horovod of the small CNN of training_throughput.py, "
                 "the variants built in the same processes and timed in turns, block by block"),
        "config": {"path": args.path, "np": args.np_list, "global_batches": args.batch_list,
                   "steps": args.steps, "blocks": args.blocks, "warmup": args.warmup,
                   "repeats": args.repeats, "variants": args.variant_list,
                   "onednn_option": args.onednn,
                   "threads_per_instance": "intra-op max(1, cores // np), inter-op 2"},
        "batches": batches,
        "goal": {"threshold": GOAL, "judged_on": "median block ratio",
                 "met": bool(checks) and all(checks)},
        "machine": stack_machine_info(load_before, onednn),
        "code": code_version(),
        "launches": runs,
        "total_wall_s": time.perf_counter() - started,
    }
    machine = report["machine"]
    title = (f"{'Keras fit' if args.path == 'fit' else 'custom loops'}: "
             f"{args.steps} steps per variant in {args.blocks} turns, {args.repeats} job(s) per "
             f"point; {machine['logical_cpus']} CPUs ({machine['cpu_model']}; oneDNN kernels "
             f"{'/'.join(onednn)}), Python {machine['python']}, TensorFlow {machine['tensorflow']}")

    def show() -> None:
        print_table(batches, args.np_list)
        print(f"\ngoal (>= {GOAL}x at every -np and batch): "
              f"{'met' if report['goal']['met'] else 'NOT met'}")

    return finish(report, args.out, lambda png: plot(batches, args.np_list, png, title), show,
                  wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
