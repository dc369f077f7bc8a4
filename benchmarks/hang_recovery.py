"""Recovery of a Horovod elastic job from a hung worker on one machine, with poprun-lite's
default options: seconds from the hang to the survivors' next training step, next to a SIGKILL
of the same worker.

What it measures
----------------
``poprun-lite -np 2 --min-np 1 --elastic-mode horovod --backend local`` (this machine, no
``--hang-timeout``: the launcher's own bound) runs ``tests/workers/elastic_loop.py`` (Horovod
elastic custom loop, ``hvd.DistributedGradientTape`` in a ``tf.function``, a commit every
``--commit-every`` steps, ``--step-sleep`` seconds per step). Once rank 0 has printed step
``--fault-step``, rank 1's worker gets:

* ``kill``          SIGKILL (the baseline: a death);
* ``stopped``       SIGSTOP (the hang check's kind "stopped", 30 s by default);
* ``busy``          SIGUSR2, on which it spins in a Python loop (``ELASTIC_HANG_ON_SIGNAL``;
  kind "busy", 600 s);
* ``deadlock``      SIGUSR2, on which it waits on a lock it holds (kind "blocked", 180 s);
* ``blocked-read``  SIGUSR2, on which it reads a pipe nobody writes (kind "blocked", 180 s).

``recovery_s``: the first step rank 0 prints after its reset (``reset rank 0 ... t=``), minus
``time.time()`` just before the signal; none within ``--recovery-cap`` s is "no recovery". Each
run also records its exit status and whether its final weights equal the NumPy reference
(tests/workers/elastic_reference.py, to 1e-6). horovodrun is not run here: on one machine its
elastic mode waits for two hosts (see docs/elastic.md); ``elastic_recovery.py`` compares the two
on network-namespace hosts (faults ``busy``, ``deadlock``, ``blocked-read`` there too).

Results: benchmarks/results/hang_recovery.json (``--out``) and a chart next to it (.png).

Run::

    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/hang_recovery.py --runs 1
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from _common import finish, launch_env, machine_info, stop, subplots  # noqa: E402
from workers.elastic_reference import loop_reference  # noqa: E402

FAULTS = ("kill", "stopped", "busy", "deadlock", "blocked-read")
SIGNALS = {"kill": signal.SIGKILL, "stopped": signal.SIGSTOP}  # the others: SIGUSR2
HANGS = {"busy": "busy", "deadlock": "lock", "blocked-read": "read"}
WORKER = os.path.join(ROOT, "tests", "workers", "elastic_loop.py")
STEP = re.compile(r"\bstep (\d+) size (\d+) t=(\d+(?:\.\d+)?)")
RESET = re.compile(r"\breset rank 0 size \d+ host \S+ t=(\d+(?:\.\d+)?)")
DEFAULT_OUT = os.path.join(HERE, "results", "hang_recovery.json")


def rank_of(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    except OSError:
        return None
    return env.get(b"HOROVOD_RANK", b"").decode() or None


def run_once(fault: str, args: argparse.Namespace, workdir: str) -> Dict[str, Any]:
    pids = os.path.join(workdir, "pids")
    os.makedirs(pids)
    out = os.path.join(workdir, "final.json")
    console = os.path.join(workdir, "console.log")
    env = launch_env() | {"ELASTIC_PID_DIR": pids, "ELASTIC_STEP_SLEEP": f"{args.step_sleep:g}",
                          "ELASTIC_HANG_ON_SIGNAL": HANGS.get(fault, "")}
    argv = [sys.executable, "-m", "popdist_launcher", "-np", "2", "--min-np", "1",
            "--elastic-mode", "horovod", "--backend", "local", "-x", "ELASTIC_PID_DIR",
            "-x", "ELASTIC_STEP_SLEEP", "-x", "ELASTIC_HANG_ON_SIGNAL", sys.executable, WORKER,
            out, str(args.steps), str(args.commit_every)]
    result: Dict[str, Any] = {"fault": fault, "recovery_s": None, "exit_code": None,
                              "weights_ok": False, "error": None}
    with open(console, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=workdir, start_new_session=True)

    def text() -> str:
        with open(console, errors="replace") as f:
            return f.read()

    def wait_for(predicate, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            if predicate():
                return True
            time.sleep(0.05)
        return predicate()

    try:
        if not wait_for(lambda: any(int(n) >= args.fault_step for n, _, _ in
                                    STEP.findall(text())), args.start_timeout):
            result["error"] = f"no step {args.fault_step} within {args.start_timeout:g} s"
            return result
        victims = [int(name.rsplit("-", 1)[1]) for name in os.listdir(pids)]
        victim = next((p for p in victims if rank_of(p) == "1"), None)
        if victim is None:
            result["error"] = "no worker of rank 1"
            return result
        t_fault = time.time()
        os.kill(victim, SIGNALS.get(fault, signal.SIGUSR2))

        def recovered() -> Optional[float]:
            body = text()
            resets = [float(t) for t in RESET.findall(body) if float(t) > t_fault]
            if not resets:
                return None
            after = [float(t) for _, _, t in STEP.findall(body) if float(t) > resets[0]]
            return after[0] - t_fault if after else None

        if wait_for(lambda: recovered() is not None, args.recovery_cap):
            result["recovery_s"] = round(recovered(), 3)
        try:
            result["exit_code"] = proc.wait(timeout=args.finish_timeout)
        except subprocess.TimeoutExpired:
            result["error"] = f"still running {args.finish_timeout:g} s after the fault"
        if result["exit_code"] == 0 and os.path.exists(out):
            with open(out) as f:
                final = json.load(f)
            want = loop_reference(args.steps)
            diff = max(abs(a - b) for a, b in zip(final["kernel"] + final["bias"],
                                                   list(want["kernel"]) + list(want["bias"])))
            result["weights_ok"] = bool(diff <= 1e-6)
        hung = re.search(r"was hung \((\w+)\): .*?; killed with SIGKILL", text())
        result["hang_line"] = hung[0] if hung else None
        result["hang_kind"] = hung[1] if hung else None
    finally:
        if proc.poll() is None:
            stop(proc)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs per fault")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="comma-separated, from: " + ", ".join(FAULTS))
    parser.add_argument("--steps", type=int, default=150, help="the program's total steps")
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--fault-step", type=int, default=25)
    parser.add_argument("--recovery-cap", type=float, default=720.0,
                        help="seconds (the default busy bound is 600 s)")
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--finish-timeout", type=float, default=780.0)
    parser.add_argument("--out", default=DEFAULT_OUT, help="the JSON report (and its .png)")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    bad = [f for f in faults if f not in FAULTS]
    if bad or not faults or args.runs < 1:
        parser.error(f"--faults takes {', '.join(FAULTS)} (got {', '.join(bad) or 'none'}); "
                     f"--runs at least 1")
    load = os.getloadavg()
    started = time.monotonic()
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hang-recovery-") as top:
        for index in range(args.runs):
            for fault in faults:
                folder = os.path.join(top, f"{fault}-{index}")
                os.makedirs(folder)
                run = run_once(fault, args, folder)
                run["index"] = index
                runs.append(run)
                print(f"{fault} run {index}: recovery {run['recovery_s']} s, exit "
                      f"{run['exit_code']}, weights ok {run['weights_ok']}"
                      + (f", error {run['error']}" if run["error"] else ""), flush=True)
    medians = {}
    for fault in faults:
        values = sorted(r["recovery_s"] for r in runs
                        if r["fault"] == fault and r["recovery_s"] is not None)
        medians[fault] = values[len(values) // 2] if values else None
    report = {"benchmark": "hang_recovery", "settings": vars(args), "runs": runs,
              "median_recovery_s": medians,
              "machine": machine_info(load, {"launcher": "poprun-lite (default hang bound)"})}

    def draw(png: str) -> None:
        fig, ax = subplots(figsize=(6, 3.5))
        ax.bar(range(len(faults)), [medians[f] or 0 for f in faults])
        ax.set_xticks(range(len(faults)))
        ax.set_xticklabels(faults)
        ax.set_ylabel("seconds from the fault to the next step")
        from _common import save_figure
        save_figure(fig, png, "poprun-lite, Horovod elastic, 2 workers, default hang bound")

    def show() -> None:
        for fault in faults:
            print(f"{fault:>14}: median recovery {medians[fault]} s")

    return finish(report, args.out, draw, show, wall_s=time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
