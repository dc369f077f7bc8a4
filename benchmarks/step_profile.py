"""Where one training step's time goes, per variant of training_throughput.py, from TensorFlow's
profiler.

What it measures
----------------
Every variant named (``--variants``, any of training_throughput.py's, custom loop or Keras fit) is
launched once per -np with the same worker, model, data and threads as training_throughput.py;
after its timed steps instance 0 traces ``--profile-steps`` more with TensorFlow's profiler, each
step marked ``train_step``. From the trace (the host plane of the ``.xplane.pb``) and the worker's
own counters, per step (medians over the traced steps where it says so):

* ``step_ms``: the marked step's wall time (median);
* ``runtime_ms``: the part of it the Python thread spent inside TensorFlow's runtime (eager
  execute and copy calls); ``python_ms`` is the rest: Python on the host between TensorFlow calls;
* ``ops``: kernels executed, on every thread; ``op_ms``: their summed time (CPU, all threads);
  ``async_kernels``: asynchronous kernels started (collectives, input reads and function calls
  across devices: the trace does not name them); ``iterator_ms``: time in the kernels that read
  input (the iterator's get-next);
* ``top_ops``: the op types with the most time;
* ``cpu_ms`` and ``minor_faults``: instance 0's CPU time (user + system) and page faults per
  timed step, from the timed run before the trace (``system_cpu_ms`` its system part).

Run: ``PATH=.venv/bin:$PATH .venv/bin/python benchmarks/step_profile.py --np 1,2`` (add
``--onednn off`` for Eigen's CPU kernels, TensorFlow's default on CPUs without AVX512-VNNI, AVX-VNNI
or AMX). Output: benchmarks/results/step_profile.json and a chart next to it (.png): each
variant's step split into Python, runtime outside kernels and kernel time. Only loopback is used;
every launch has a timeout (the launcher's process group is stopped, nothing else).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import glob
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (ONEDNN_CHOICES, ONEDNN_HELP, finish, machine_info, save_figure,  # noqa: E402
                     subplots)
from training_throughput import BY_NAME, command, run_worker  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                           "step_profile.json")
RUNTIME_PREFIXES = ("TFE_", "Eager")  # the Python thread inside TensorFlow's runtime
ITERATOR_WORDS = ("IteratorGetNext", "GetNextFromShard")  # reading the next input element


def intervals_union_ps(spans: List[Tuple[int, int]]) -> int:
    """Total length of the union of [start, end) spans (picoseconds)."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def summarize_trace(path: str) -> Dict[str, Any]:
    """Per-step numbers from one ``.xplane.pb`` (see the module docstring)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    names = {k: v.name for k, v in host.event_metadata.items()}
    # (line index, line name, event name, start ps, duration ps); several lines are "python"
    events = [(i, line.name, names[e.metadata_id], line.timestamp_ns * 1000 + e.offset_ps,
               e.duration_ps) for i, line in enumerate(host.lines) for e in line.events]
    marks = [(i, start, start + dur) for i, _, name, start, dur in events if name == "train_step"]
    if not marks:
        raise RuntimeError(f"no train_step marks in {path}")
    main_line = marks[0][0]  # the Python thread that ran the steps
    steps: List[Tuple[int, int]] = []
    for a, b in sorted((a, b) for i, a, b in marks if i == main_line):
        if not steps or a >= steps[-1][1]:  # a tf.function named train_step nests inside ours
            steps.append((a, b))
    first, last = steps[0][0], steps[-1][1]
    in_steps = [e for e in events if first <= e[3] < last]
    runtime = [intervals_union_ps([(max(s, a), min(s + d, b)) for i, _, name, s, d in in_steps
                                   if i == main_line and name.startswith(RUNTIME_PREFIXES)
                                   and s < b and s + d > a]) for a, b in steps]
    # Kernels are traced as "node name:OpType"; the executor's own events have "::" in them.
    ops = [(name.rsplit(":", 1)[1].strip(), dur) for i, _, name, s, dur in in_steps
           if i != main_line and ":" in name and "::" not in name]
    async_starts = sum(1 for e in in_steps if e[2] == "ExecutorState::ProcessAsync::Start")
    by_type: Dict[str, float] = collections.Counter()
    for kind, dur in ops:
        by_type[kind] += dur
    n, ms = len(steps), 1e-9
    step_ms = statistics.median((b - a) * ms for a, b in steps)
    runtime_ms = statistics.median(r * ms for r in runtime)
    return {
        "traced_steps": n,
        "step_ms": step_ms,
        "runtime_ms": runtime_ms,
        "python_ms": step_ms - runtime_ms,
        "ops": len(ops) / n,
        "op_ms": sum(d for _, d in ops) * ms / n,
        "async_kernels": async_starts / n,
        "iterator_ms": sum(e[4] for e in in_steps if e[0] != main_line and any(
            word in e[2] for word in ITERATOR_WORDS)) * ms / n,
        "top_ops": {k: v * ms / n for k, v in by_type.most_common(8)},
    }


def profile(variant: str, np_: int, args: argparse.Namespace) -> Dict[str, Any]:
    """Launch one variant at one -np with tracing; its worker result and trace summary."""
    with tempfile.TemporaryDirectory(prefix="step-profile-") as tmp:
        logdir = os.path.join(tmp, "trace")
        run = run_worker(command(BY_NAME[variant], np_, args.timeout), np_,
                         ["--variant", variant, "--global-batch", str(args.global_batch),
                          "--steps", str(args.steps), "--warmup", str(args.warmup),
                          "--profile-dir", logdir, "--profile-steps", str(args.profile_steps)],
                         args, tmp)
        if run.result is None:
            return {"error": run.error}
        result = run.result
        traces = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        if not traces:
            return {"error": "the profiler wrote no trace"}
        summary = summarize_trace(sorted(traces)[-1])
    summary.update({
        "samples_per_s": result["samples_per_s"],
        "cpu_ms": result["cpu_user_ms_per_step"] + result["cpu_system_ms_per_step"],
        "system_cpu_ms": result["cpu_system_ms_per_step"],
        "minor_faults": result["minor_faults_per_step"],
        "onednn": result.get("onednn"),
    })
    return summary


def print_table(results: Dict[str, Dict[str, Any]]) -> None:
    cols = ("step_ms", "python_ms", "runtime_ms", "op_ms", "ops", "async_kernels", "iterator_ms",
            "cpu_ms", "system_cpu_ms", "minor_faults")
    print(f"\n{'variant @ -np':28s}" + "".join(f"{c:>14s}" for c in cols))
    for key, r in results.items():
        if "error" in r:
            print(f"{key:28s} FAILED: {r['error']}")
            continue
        print(f"{key:28s}" + "".join(f"{r[c]:14.2f}" for c in cols))
        print(f"{'':28s} top ops (ms/step): " + ", ".join(
            f"{k} {v:.2f}" for k, v in list(r["top_ops"].items())[:5]))


def plot(results: Dict[str, Dict[str, Any]], path: str, title: str) -> None:
    keys = [k for k, r in results.items() if "error" not in r]
    fig, ax = subplots(1, 1, figsize=(max(6, 1.2 * len(keys)), 5))
    python = [results[k]["python_ms"] for k in keys]
    runtime_only = [max(0.0, results[k]["runtime_ms"]) for k in keys]
    ax.bar(keys, python, label="Python between TensorFlow calls", color="tab:orange")
    ax.bar(keys, runtime_only, bottom=python, label="inside TensorFlow (waiting on kernels)",
           color="tab:blue")
    ax.scatter(keys, [results[k]["op_ms"] for k in keys], color="black", zorder=3,
               label="kernel time, all threads")
    ax.set_ylabel("ms per step (median of traced steps)")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    save_figure(fig, path, title)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", default="1,2", help="comma-separated instance counts")
    parser.add_argument("--variants", default="horovod,popdist,ipu-horovod,mwms,ipu-multi-worker",
                        help="comma-separated; any of: " + ", ".join(BY_NAME))
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=60, help="timed steps before the trace")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--onednn", choices=ONEDNN_CHOICES, default="default", help=ONEDNN_HELP)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per launch")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.np_list = [int(n) for n in args.np.split(",") if n.strip()]
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variant_list if v not in BY_NAME]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    started = time.perf_counter()
    results: Dict[str, Dict[str, Any]] = {}
    for np_ in args.np_list:
        for variant in args.variant_list:
            results[f"{variant} @ {np_}"] = profile(variant, np_, args)
            print(f"profiled {variant} at -np {np_}", flush=True)
    report = {
        "benchmark": "step_profile",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "config": {k: getattr(args, k) for k in ("np_list", "variant_list", "global_batch",
                                                 "steps", "warmup", "profile_steps", "onednn")},
        "results": results,
        "machine": machine_info(load_before, {}),
        "total_wall_s": time.perf_counter() - started,
    }
    title = (f"one step, global batch {args.global_batch}, oneDNN {args.onednn}; "
             f"{report['machine']['cpu_model']}")
    return finish(report, args.out, lambda png: plot(results, png, title),
                  lambda: print_table(results), wall_s=report["total_wall_s"])


if __name__ == "__main__":
    sys.exit(main())
