"""Recovery of a Horovod elastic job from a lost or hung host: poprun-lite's elastic mode next to
horovodrun's, on the same program and the same hosts.

Launchers: ``poprun-lite``; ``poprun-lite-nocut``, the same with ``POPRUN_CUT_PEERS=0`` (the
launcher does not tell the survivors' wrappers to shut down their programs' connections to the
job's hosts when a worker fails: the behaviour before that notice, for a before/after in one
run); ``horovodrun``.

What it measures
----------------
Two test hosts, ``hostA`` and ``hostB`` (network namespaces with their own sshd,
tests/netns_hosts.py), 2 slots each, run ``tests/workers/elastic_loop.py`` (Horovod elastic custom
loop, a commit every ``--commit-every`` steps, ``--step-sleep`` seconds per step) with ``-np 4
--min-np 2 --max-np 4 --blacklist-cooldown-range 1 2`` and a host discovery script that prints a
file. Each run, once rank 0 has printed step ``--loss-step`` at size 4, loses hostB:

* ``kill``         every worker on hostB gets SIGKILL (pids from the workers' pid files);
* ``unreachable``  hostB's link goes down (``set_down``: its packets vanish, its processes run on);
* ``hung``         every worker on hostB gets SIGSTOP (a hung worker: its sockets stay open, its
                   peers wait in their collective); hostB stays in the discovery file (the host
                   is fine), and poprun-lite gets ``--hang-timeout`` (``--hang-timeout`` here;
                   by default the launcher's own bound).
* ``busy``, ``deadlock``, ``blocked-read``: every worker on hostB gets SIGUSR2, on which the
                   program (``ELASTIC_HANG_ON_SIGNAL``) spins in Python, waits on a lock it
                   holds, or reads a pipe nobody writes: processes that run or sleep, not
                   stopped ones; otherwise as ``hung``.

and, for ``kill`` and ``unreachable``, hostB leaves the discovery file at the same moment. Measured,
from rank 0's step lines (``step <n> size <s> t=<time.time()>``; the namespaces share the clock):

* ``recovery_s``    time of the first step at a size below 4 minus ``time.time()`` just before the
                    SIGKILL / set_down; "no recovery" when none comes within ``--recovery-cap``
                    seconds (expected for horovodrun when unreachable: its ssh sessions to the
                    host stay open, so its registration round never completes);
* ``steps_redone``  the last step printed at size 4 minus the step the survivors resumed from
                    (the last commit);
* ``scale_up_s``    hostB answers again (``set_up``), and ``--add-back-after`` seconds after the
                    recovery it is written back to the discovery file: from then to the first step
                    at size 4.

Each run also records its exit status, whether its final weights equal the NumPy reference
(tests/workers/elastic_reference.py, to 1e-6) and any process left on the hosts (ended by the
benchmark after the run). horovodrun's driver runs in a third test host, ``hostC`` (its
``--network-interface`` needs one interface name, ``eth0``, on the driver and every host; see
tests/elastic_peer.py); poprun-lite runs from the root namespace with ``--ssh-config`` and
``--host-subnet``, as the multi-host tests run it. Both get ``HOROVOD_GLOO_TIMEOUT_SECONDS``
(``--gloo-timeout``): a survivor blocked in a collective with a lost peer waits that long.

Every launch is bounded: one that does not finish is stopped (its process group, then whatever
is left on the test hosts, by pid). ``--runs`` runs per (fault, launcher), launchers in an order
rotated from run to run. Medians over the runs that recovered; ratios poprun-lite / horovodrun
and poprun-lite / poprun-lite-nocut of the median recovery (goal: at most 1; a peer that never
recovers counts as a met goal when poprun-lite recovered every run).

Results: benchmarks/results/elastic_recovery.json (``--out``) and a chart next to it (.png). Needs
root (network namespaces). A full run (defaults) takes about 45 minutes on 2 cores, most of it
horovodrun waiting out the recovery cap.

Run::

    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/elastic_recovery.py
    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/elastic_recovery.py --runs 1 --faults kill
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from _common import (ROOT, dist_version, finish, git_state, launch_env, machine_info,  # noqa: E402
                     save_figure, subplots, telling_line)
from elastic_peer import (Launch, end_leftovers, horovodrun_argv, horovodrun_env,  # noqa: E402
                          poprun_lite_argv, write_discovery_script, write_hosts_file,
                          write_ssh_wrapper)
from netns_hosts import TestHosts, missing_prerequisites  # noqa: E402
from workers.elastic_reference import loop_reference  # noqa: E402

LAUNCHERS = ("poprun-lite", "poprun-lite-nocut", "horovodrun")
NOCUT = {"POPRUN_CUT_PEERS": "0"}  # poprun-lite-nocut: the launcher sends survivors no notice
FAULTS = ("kill", "unreachable", "hung", "busy", "deadlock", "blocked-read")
HANGS = {"busy": "busy", "deadlock": "lock", "blocked-read": "read"}  # ELASTIC_HANG_ON_SIGNAL
WORKER = os.path.join(ROOT, "tests", "workers", "elastic_loop.py")
SLOTS, NP, MIN_NP = 2, 4, 2
LOST, KEPT, DRIVER = "hostB", "hostA", "hostC"
TOLERANCE = 1e-6
DEFAULT_OUT = os.path.join(HERE, "results", "elastic_recovery.json")


@dataclass
class Run:
    launcher: str
    fault: str
    index: int
    ok: bool = False                        # finished, exit 0, reference weights
    error: Optional[str] = None
    exit_code: Optional[int] = None
    last_step_before_loss: Optional[int] = None
    recovery_s: Optional[float] = None      # None: no step at a smaller size within the cap
    resumed_from: Optional[int] = None
    steps_redone: Optional[int] = None
    first_smaller_step_s: Optional[float] = None  # even past the cap (after the host came back)
    host_back_s: Optional[float] = None     # unreachable: set_up, seconds after the loss
    scale_up_s: Optional[float] = None
    final_step: Optional[int] = None
    weights_max_abs_diff: Optional[float] = None
    wall_s: Optional[float] = None
    leftovers: Dict[str, List[int]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)


def hostb_pids(pid_dir: Path) -> List[int]:
    return [int(p.read_text()) for p in sorted(pid_dir.glob(f"pid-{LOST}-*"))]


def run_once(hosts: TestHosts, wrapper: Path, args: argparse.Namespace, launcher: str,
             fault: str, index: int, workdir: Path) -> Run:
    run = Run(launcher, fault, index)
    folder = workdir / f"{launcher}-{fault}-{index}"
    pid_dir = folder / "pids"
    pid_dir.mkdir(parents=True)
    hosts_file = folder / "hosts.txt"
    write_hosts_file(hosts_file, [(KEPT, SLOTS), (LOST, SLOTS)])
    script = write_discovery_script(folder, hosts_file)
    out = folder / "final.json"
    program = [sys.executable, WORKER, str(out), str(args.steps), str(args.commit_every)]
    variables = {"HOROVOD_GLOO_TIMEOUT_SECONDS": f"{args.gloo_timeout:g}",
                 "ELASTIC_PID_DIR": str(pid_dir), "ELASTIC_STEP_SLEEP": f"{args.step_sleep:g}"}
    if fault in HANGS:
        variables["ELASTIC_HANG_ON_SIGNAL"] = HANGS[fault]
    if launcher == "horovodrun":
        argv = horovodrun_argv(hosts, DRIVER, script, program, np=NP, min_np=MIN_NP, max_np=NP)
        env = horovodrun_env(wrapper, variables, launch_env())
    else:
        argv = poprun_lite_argv(hosts, script, program, np=NP, min_np=MIN_NP, max_np=NP,
                                variables=variables)
        env = launch_env() | (NOCUT if launcher == "poprun-lite-nocut" else {})
        if args.hang_timeout is not None:
            env["POPRUN_HANG_TIMEOUT"] = f"{args.hang_timeout:g}"
    started = time.monotonic()
    launch = Launch(argv, folder / "console.log", env, cwd=folder)
    down = False
    try:
        if not launch.wait_for(lambda: any(s.size == NP and s.n >= args.loss_step
                                           for s in launch.steps()), args.start_timeout):
            run.error = (f"no step {args.loss_step} at size {NP} within {args.start_timeout:g} s: "
                         + telling_line(str(launch.log), keep_end=True))
            return run
        victims = hostb_pids(pid_dir)
        if fault not in ("unreachable",) and not victims:
            run.error = f"no pid file of a worker on {LOST} in {pid_dir}"
            return run
        t_loss = time.time()
        if fault != "unreachable":
            sig = {"kill": signal.SIGKILL, "hung": signal.SIGSTOP}.get(fault, signal.SIGUSR2)
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        else:
            hosts.set_down(LOST)
            down = True
        if fault in ("kill", "unreachable"):
            write_hosts_file(hosts_file, [(KEPT, SLOTS)])

        def smaller() -> bool:
            return any(s.size < NP and s.t >= t_loss for s in launch.steps())

        recovered = launch.wait_for(smaller, args.recovery_cap)
        if not recovered:
            run.notes.append(f"no recovery within {args.recovery_cap:g} s")
        if down:
            hosts.set_up(LOST)
            down = False
            run.host_back_s = round(time.time() - t_loss, 3)
        if recovered:
            launch.wait_for(lambda: False, args.add_back_after)
        t_add = time.time()
        write_hosts_file(hosts_file, [(KEPT, SLOTS), (LOST, SLOTS)])
        if recovered and launch.wait_for(lambda: any(s.size == NP and s.t >= t_add
                                                     for s in launch.steps()), args.scale_timeout):
            first = next(s for s in launch.steps() if s.size == NP and s.t >= t_add)
            run.scale_up_s = round(first.t - t_add, 3)
        elif recovered:
            run.notes.append("no step at full size after the host was added back"
                             + ("" if launch.running() else " (the job ended first)"))
        run.exit_code = launch.wait(args.finish_timeout)
        if run.exit_code is None:
            run.error = f"still running {args.finish_timeout:g} s after the host was added back"
        analyse(run, launch, t_loss, recovered, args)
    finally:
        if launch.running():
            run.exit_code = run.exit_code if run.exit_code is not None else launch.stop()
        if down:
            hosts.set_up(LOST)
        run.leftovers = end_leftovers(hosts, (KEPT, LOST))
        run.wall_s = round(time.monotonic() - started, 1)
    if run.error is None and run.exit_code != 0:
        run.error = f"exit status {run.exit_code}: " + telling_line(str(launch.log), keep_end=True)
    if run.error is None:
        check_weights(run, out, args.steps)
    run.ok = run.error is None
    return run


def analyse(run: Run, launch: Launch, t_loss: float, recovered: bool,
            args: argparse.Namespace) -> None:
    """Recovery, steps redone and the first smaller-world step, from rank 0's step lines."""
    lines = launch.steps()
    first = next((s for s in lines if s.size < NP and s.t >= t_loss), None)
    if first is None:
        return
    run.first_smaller_step_s = round(first.t - t_loss, 3)
    before = [s.n for s in lines if s.size == NP and s.t < first.t]
    run.last_step_before_loss = max(before) if before else None
    run.resumed_from = first.n - 1
    if run.last_step_before_loss is not None:
        run.steps_redone = run.last_step_before_loss - run.resumed_from
    if recovered:
        run.recovery_s = run.first_smaller_step_s


def check_weights(run: Run, out: Path, total: int) -> None:
    try:
        final = json.loads(out.read_text())
    except (OSError, ValueError) as e:
        run.error = f"no final weights ({e})"
        return
    ref = loop_reference(total)
    run.final_step = final["step"]
    run.weights_max_abs_diff = max(abs(a - b) for key in ("kernel", "bias")
                                   for a, b in zip(final[key], ref[key]))
    if run.final_step != total or run.weights_max_abs_diff > TOLERANCE:
        run.error = (f"final step {run.final_step} (expected {total}), weights off the "
                     f"reference by {run.weights_max_abs_diff:.3g}")


def median(values: Sequence[float]) -> Optional[float]:
    return round(statistics.median(values), 3) if values else None


def summarize(runs: List[Run]) -> Dict[str, Any]:
    recovered = [r for r in runs if r.recovery_s is not None]
    redone = [r.steps_redone for r in recovered if r.steps_redone is not None]
    scale = [r.scale_up_s for r in runs if r.scale_up_s is not None]
    return {
        "runs": len(runs), "ok": sum(r.ok for r in runs), "recovered": len(recovered),
        "recovery_s_median": median([r.recovery_s for r in recovered]),
        "recovery_s_min": min((r.recovery_s for r in recovered), default=None),
        "recovery_s_max": max((r.recovery_s for r in recovered), default=None),
        "steps_redone_median": median(redone),
        "steps_redone_max": max(redone, default=None),
        "scale_up_s_median": median(scale),
        "runs_with_leftovers": sum(bool(r.leftovers) for r in runs),
    }


def compare(stats: Dict[str, Dict[str, Dict[str, Any]]], faults: Sequence[str],
            peer_name: str = "horovodrun") -> Dict[str, Any]:
    """poprun-lite / ``peer_name`` median recovery per fault, and whether the goal (<= 1)
    holds."""
    out = {}
    for fault in faults:
        ours, peer = stats[fault].get("poprun-lite"), stats[fault].get(peer_name)
        if not ours or not peer:
            continue
        all_ours = ours["recovered"] == ours["runs"]
        a, b = ours["recovery_s_median"], peer["recovery_s_median"]
        if a is not None and b is not None:
            out[fault] = {"ratio": round(a / b, 3), "goal_met": all_ours and a <= b}
        else:
            out[fault] = {"ratio": None,
                          "goal_met": all_ours and peer["recovered"] == 0,
                          "note": f"{peer_name} never recovered" if all_ours and
                          peer["recovered"] == 0 else "poprun-lite did not recover every run"}
    return out


def plot(runs: List[Run], stats: Dict[str, Dict[str, Dict[str, Any]]], faults: Sequence[str],
         launchers: Sequence[str], cap: float, path: str) -> None:
    fig, axes = subplots(1, 3, figsize=(13, 4.2))
    metrics = (("recovery_s", "seconds from the loss to the next step", "recovery_s_median"),
               ("steps_redone", "steps redone", "steps_redone_median"),
               ("scale_up_s", "seconds from add-back to a step at size 4", "scale_up_s_median"))
    colours = {"poprun-lite": "tab:blue", "poprun-lite-nocut": "tab:cyan",
               "horovodrun": "tab:orange"}
    width = 0.8 / max(1, len(launchers))
    for ax, (key, label, stat_key) in zip(axes, metrics):
        for j, launcher in enumerate(launchers):
            for i, fault in enumerate(faults):
                x = i + (j - (len(launchers) - 1) / 2) * width
                stat = stats[fault].get(launcher)
                if not stat:
                    continue
                value = stat[stat_key]
                if key == "recovery_s" and stat["recovered"] == 0:
                    ax.bar(x, cap, width, color="white", edgecolor=colours[launcher],
                           hatch="//")
                    ax.text(x, cap, f"none in\n{cap:g} s", ha="center", va="bottom", fontsize=7)
                elif value is not None:
                    ax.bar(x, value, width, color=colours[launcher],
                           label=launcher if i == 0 else None)
                points = [getattr(r, key) for r in runs if r.launcher == launcher
                          and r.fault == fault and r.recovery_s is not None
                          and getattr(r, key) is not None]
                ax.plot([x] * len(points), points, "k.", markersize=4)
        ax.set_xticks(range(len(faults)))
        ax.set_xticklabels(faults)
        ax.set_ylabel(label, fontsize=8)
    axes[0].legend(fontsize=8)
    save_figure(fig, path, "elastic recovery: 2 hosts x 2 slots, hostB lost (median bars, "
                           "dots = runs)")


def print_table(stats: Dict[str, Dict[str, Dict[str, Any]]],
                ratios: Dict[str, Dict[str, Any]]) -> None:
    print(f"\n{'fault':<12}{'launcher':<19}{'ok/runs':>8}{'recovered':>10}{'recovery s':>12}"
          f"{'redone':>8}{'scale-up s':>12}")
    for fault, per in stats.items():
        for launcher, s in per.items():
            rec = "-" if s["recovery_s_median"] is None else f"{s['recovery_s_median']:.2f}"
            red = "-" if s["steps_redone_median"] is None else f"{s['steps_redone_median']:g}"
            up = "-" if s["scale_up_s_median"] is None else f"{s['scale_up_s_median']:.2f}"
            print(f"{fault:<12}{launcher:<19}{s['ok']:>4}/{s['runs']:<3}{s['recovered']:>10}"
                  f"{rec:>12}{red:>8}{up:>12}")
    for peer, per in ratios.items():
        for fault, r in per.items():
            print(f"{fault}: poprun-lite/{peer} recovery {r['ratio']}, goal met: "
                  f"{r['goal_met']}" + (f" ({r['note']})" if r.get("note") else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per fault and launcher")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help="comma-separated, from: " + ", ".join(LAUNCHERS))
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="comma-separated, from: " + ", ".join(FAULTS))
    parser.add_argument("--steps", type=int, default=150, help="the program's total steps")
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--loss-step", type=int, default=25,
                        help="hostB is lost once rank 0 has printed this step at size 4")
    parser.add_argument("--gloo-timeout", type=float, default=20.0,
                        help="HOROVOD_GLOO_TIMEOUT_SECONDS for both launchers")
    parser.add_argument("--recovery-cap", type=float, default=720.0,
                        help="seconds after the loss without a smaller step = no recovery")
    parser.add_argument("--hang-timeout", type=float, default=None,
                        help="poprun-lite's --hang-timeout [default: the launcher's own bound]")
    parser.add_argument("--add-back-after", type=float, default=5.0,
                        help="seconds after the recovery before hostB is added back")
    parser.add_argument("--start-timeout", type=float, default=240.0,
                        help="seconds for the job to reach --loss-step")
    parser.add_argument("--scale-timeout", type=float, default=120.0,
                        help="seconds after the add-back for a step at size 4")
    parser.add_argument("--finish-timeout", type=float, default=300.0,
                        help="seconds after the add-back for the job to end")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep every run's console log, pid files and results here")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="JSON output; the chart goes next to it with a .png suffix")
    args = parser.parse_args(argv)
    launchers = [x for x in args.launchers.split(",") if x]
    faults = [x for x in args.faults.split(",") if x]
    bad = [x for x in launchers if x not in LAUNCHERS] + [x for x in faults if x not in FAULTS]
    if bad or not launchers or not faults:
        parser.error(f"unknown or missing launcher/fault {bad}: choose from "
                     f"{', '.join(LAUNCHERS)} and {', '.join(FAULTS)}")
    problems = missing_prerequisites()
    if problems:
        print("elastic_recovery: the test hosts cannot run here: " + "; ".join(problems)
              + " (scripts/install-test-hosts.sh installs what is missing)", file=sys.stderr)
        return 2

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="elastic-recovery-"))
    workdir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    started = time.monotonic()
    runs: List[Run] = []
    try:
        with TestHosts((KEPT, LOST, DRIVER), workdir=workdir) as hosts:
            wrapper = write_ssh_wrapper(hosts, hosts.dir / "bin")
            for index in range(args.runs):
                order = launchers[index % len(launchers):] + launchers[:index % len(launchers)]
                for fault in faults:
                    for launcher in order:
                        run = run_once(hosts, wrapper, args, launcher, fault, index, workdir)
                        runs.append(run)
                        print(f"{fault:<12}{launcher:<19}run {index}: recovery "
                              f"{run.recovery_s} s, redone {run.steps_redone}, scale-up "
                              f"{run.scale_up_s} s, {'ok' if run.ok else run.error}"
                              + (f" [{'; '.join(run.notes)}]" if run.notes else ""),
                              file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    stats = {fault: {launcher: summarize([r for r in runs if r.fault == fault
                                          and r.launcher == launcher])
                     for launcher in launchers} for fault in faults}
    ratios = {peer: compare(stats, faults, peer) for peer in launchers if peer != "poprun-lite"}
    report = {
        "benchmark": "elastic_recovery",
        "what": "seconds from a lost host to the next training step, steps redone, and seconds "
                "to scale up again, poprun-lite elastic vs horovodrun elastic",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(load_before, {"horovod": dist_version("horovod"),
                                              "tensorflow": dist_version("tensorflow",
                                                                         "tensorflow-cpu")}),
        "code": git_state(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "keep")}
        | {"np": NP, "min_np": MIN_NP, "max_np": NP, "slots_per_host": SLOTS,
           "cooldown_range": [1, 2], "lost_host": LOST, "horovodrun_driver_host": DRIVER,
           "program": "tests/workers/elastic_loop.py"},
        "stats": stats,
        "ratio_poprun_lite_over": ratios,
        "runs": [asdict(r) for r in runs],
        "wall_s": round(time.monotonic() - started, 1),
    }
    return finish(report, args.out,
                  lambda png: plot(runs, stats, faults, launchers, args.recovery_cap, png),
                  lambda: print_table(stats, ratios), final_newline=True,
                  wall_s=time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
