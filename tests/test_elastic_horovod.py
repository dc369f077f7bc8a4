"""Horovod elastic programs, unmodified, under poprun-lite: Horovod's elastic driver in its helper
process, every worker started by the launcher through the backend and its wrapper. On two
network-namespace hosts (a host's workers killed, a host cut off, below --min-np) and on one
host (one instance killed): the job goes on, the final weights equal the NumPy reference, every
membership change is one line on the console and in membership.log, nothing is left behind."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import pytest

from conftest import LAUNCHER, wait_gone
from netns_hosts import TestHosts, describe, require_test_hosts

sys.path.insert(0, str(Path(__file__).parent / "workers"))
from elastic_reference import keras_reference, loop_reference  # noqa: E402

pytestmark = pytest.mark.usefixtures("horovod_cycle_5ms")  # conftest: idle Horovod cycling

WORKERS = Path(__file__).parent / "workers"
STEP = re.compile(r"^\[\d+\]<stdout>:step (\d+) size (\d+) t=([0-9.]+)$", re.MULTILINE)
ROUND = re.compile(r"\] round (\d+): (\d+) instance\(s\) on ([^ ]+)")
TOTAL, COMMIT = 80, 5  # custom loop: steps, commit every
# Keras: 8 epochs of 10 steps, commit every 4. Survivors wait HOROVOD_GLOO_TIMEOUT_SECONDS (30 s,
# the elastic default) for a new worker to reach hvd.init(): TensorFlow's import on a loaded
# machine must fit in it, so the tests keep the default.
WORKER_ARGS = {"elastic_loop.py": (str(TOTAL), str(COMMIT)), "elastic_keras.py": ("8", "10", "4")}


class Job:
    """One poprun-lite run in the background (``before``: the command that starts it, such as
    salloc), its console in a file."""

    def __init__(self, tmp: Path, args: List[str], env: Optional[dict] = None,
                 before: List[str] = ()) -> None:
        self.tmp = tmp
        self.pids = tmp / "pids"
        self.pids.mkdir(parents=True)
        self.out = tmp / "weights.json"
        self.console = tmp / "console.txt"
        self.output_dir = tmp / "logs"
        env = {**os.environ, "ELASTIC_PID_DIR": str(self.pids), "ELASTIC_STEP_SLEEP": "0.1",
               **(env or {})}
        with open(self.console, "wb") as console:
            self.proc = subprocess.Popen(
                list(before) + LAUNCHER + args[:-1] + ["--output-dir", str(self.output_dir),
                                        "-x", "ELASTIC_PID_DIR", "-x", "ELASTIC_STEP_SLEEP"]
                + [sys.executable, str(WORKERS / args[-1]), str(self.out), *WORKER_ARGS[args[-1]]],
                stdout=console, stderr=subprocess.STDOUT, env=env, cwd=str(WORKERS.parent.parent))
        self.extra: List[str] = []

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def wait_for_step(self, step: int, size: Optional[int] = None, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(int(n) >= step and (size is None or int(s) == size)
                   for n, s, _ in STEP.findall(self.text())):
                return
            assert self.proc.poll() is None, self.text()[-5000:]
            time.sleep(0.1)
        raise AssertionError(f"no step {step} at size {size}:\n{self.text()[-5000:]}")

    def worker_pids(self) -> List[int]:
        return [int(p.name.rsplit("-", 1)[1]) for p in self.pids.iterdir()]

    def finish(self, timeout: float = 300) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the job did not end:\n{self.text()[-5000:]}")
        return self.text()


def steps_after(text: str, moment: float) -> List[tuple]:
    return [(int(n), int(s), float(t)) for n, s, t in STEP.findall(text) if float(t) > moment]


def rounds(text: str) -> List[tuple]:
    return [(int(n), int(size), hosts) for n, size, hosts in ROUND.findall(text)]


def check_weights(job: Job, reference) -> dict:
    result = json.loads(job.out.read_text())
    want = reference(result["step"]) if reference is keras_reference else reference(TOTAL)
    np.testing.assert_allclose(result["kernel"], want["kernel"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(result["bias"], want["bias"], rtol=0, atol=1e-9)
    return result


def check_membership_log(job: Job, text: str) -> None:
    """Every membership line of the console is in membership.log, in the same order."""
    console = [m.group(1) for m in re.finditer(r"^poprun-lite: \[[0-9:.]+\] (.*)$", text,
                                               re.MULTILINE)]
    logged = [line.split(" ", 1)[1] for line in
              (job.output_dir / "membership.log").read_text().splitlines()]
    assert console == logged and console


def recovery(text: str, moment: float, size: int) -> float:
    """Seconds from ``moment`` to rank 0's first step at ``size`` after it."""
    first = next(t for _, s, t in steps_after(text, moment) if s == size)
    return first - moment


# ---- two hosts ------------------------------------------------------------------------------

@pytest.fixture
def hosts(tmp_path):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as test_hosts:
        yield test_hosts


def elastic_args(hosts, tmp: Path, slots: int, *extra: str) -> List[str]:
    """hostA and hostB with ``slots`` each from a discovery script that prints hosts.txt;
    -np and --max-np every slot, --min-np one host's."""
    listing = tmp / "hosts.txt"
    listing.write_text(f"hostA:{slots}\nhostB:{slots}\n")
    script = tmp / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(0o755)
    return ["-np", str(2 * slots), "--min-np", str(slots), "--max-np", str(2 * slots),
            "--host-discovery-script", str(script), "--ssh-config", hosts.ssh_config,
            "--host-subnet", hosts.subnet, "--elastic-mode", "horovod", "--start-timeout", "60",
            *extra]


def nothing_left(hosts) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (hosts.pids_in("hostA", include_sshd_sessions=False)
                                           or hosts.pids_in("hostB", include_sshd_sessions=False)):
        time.sleep(0.2)
    for name in ("hostA", "hostB"):
        left = hosts.pids_in(name, include_sshd_sessions=False)
        assert left == [], f"left running on {name}: {describe(left)}"


def kill_host_b_workers(hosts, job: Job, slots: int) -> float:
    on_b = set(hosts.pids_in("hostB", include_sshd_sessions=False))
    victims = [p for p in job.worker_pids() if p in on_b]
    assert len(victims) == slots, (victims, on_b)
    moment = time.time()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    return moment


# With 2 slots per host, the survivor that is not hostB's neighbour in Gloo's ring would wait
# HOROVOD_GLOO_TIMEOUT_SECONDS in its collective (its peer is alive but gave up): its wrapper
# shuts its connections down instead (test_elastic_fast_recovery.py).
@pytest.mark.slow
@pytest.mark.parametrize("worker,slots", [("elastic_loop.py", 2), ("elastic_keras.py", 1)])
def test_killed_host_b_workers_then_host_b_back(hosts, tmp_path, worker, slots):
    job = Job(tmp_path, elastic_args(hosts, tmp_path, slots, "--blacklist-cooldown-range", "1",
                                     "2", worker))
    job.wait_for_step(12, size=2 * slots)
    moment = kill_host_b_workers(hosts, job, slots)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference if worker == "elastic_loop.py" else keras_reference)
    sizes = [size for _, size, _ in rounds(text)]
    assert sizes[0] == 2 * slots and slots in sizes and sizes[-1] == 2 * slots, sizes
    assert (slots, f"hostA:{slots}") in [(s, h) for _, s, h in rounds(text)]
    assert re.search(rf"instance \d+ \(rank \d of {2 * slots}\) on hostB was killed by SIGKILL",
                     text)
    assert re.search(r"hostB blacklisted for [0-9.]+ s", text)
    assert "===== elastic job: " in text and "job succeeded" in text
    for number, _, _ in rounds(text):
        assert f"poprun-lite: round {number} (" in text  # the summary lists every round
    check_membership_log(job, text)
    assert (job.output_dir / "attempt-1").is_dir()
    print(f"\n{worker}, {slots} slot(s) per host: loss -> first step at size {slots}: "
          f"{recovery(text, moment, slots):.2f} s; -> first step at size {2 * slots} again: "
          f"{recovery(text, moment, 2 * slots):.2f} s")
    nothing_left(hosts)


@pytest.mark.slow
def test_host_b_cut_off_then_back(hosts, tmp_path):
    job = Job(tmp_path, elastic_args(hosts, tmp_path, 2, "--blacklist-cooldown-range", "1", "2",
                                     "elastic_loop.py"))
    job.wait_for_step(12, size=4)
    (tmp_path / "hosts.txt").write_text("hostA:2\n")
    moment = time.time()
    hosts.set_down("hostB")
    job.wait_for_step(1, size=2)
    hosts.set_up("hostB")
    (tmp_path / "hosts.txt").write_text("hostA:2\nhostB:2\n")
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert re.search(r"hostB lost: instance \d+ \(rank \d of 4\) on hostB was lost", text)
    sizes = [size for _, size, _ in rounds(text)]
    assert sizes[0] == 4 and 2 in sizes and sizes[-1] == 4, sizes
    check_membership_log(job, text)
    print(f"\nunreachable: loss -> first step at size 2: {recovery(text, moment, 2):.2f} s")
    nothing_left(hosts)


@pytest.mark.slow
def test_a_host_the_discovery_script_drops_is_drained(hosts, tmp_path):
    job = Job(tmp_path, elastic_args(hosts, tmp_path, 1, "elastic_loop.py"))
    job.wait_for_step(12, size=2)
    (tmp_path / "hosts.txt").write_text("hostA:1\n")
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert [(size, on) for _, size, on in rounds(text)] == [(2, "hostA:1,"), (1, "hostA:1")]
    assert "hostB removed by the discovery script" in text
    assert "blacklisted" not in text  # leaving the job is no failure
    assert re.search(r"instance \d \(rank 1 of 2\) on hostB .* after its host left the job", text)
    check_membership_log(job, text)
    nothing_left(hosts)


@pytest.mark.slow
def test_below_min_np_for_the_elastic_timeout_ends_the_job_naming_the_host(hosts, tmp_path):
    # (--elastic-timeout bounds the first round's wait for both hosts too: on a loaded machine
    # hostA's probe over ssh took 4.3 s, so 5 s could end the job before the test's fault.)
    args = elastic_args(hosts, tmp_path, 1, "--elastic-timeout", "15", "elastic_loop.py")
    args[args.index("--min-np") + 1] = "2"
    job = Job(tmp_path, args)
    job.wait_for_step(6, size=2)
    # hostB stops answering: the host failed, so it is blacklisted (a program failure there
    # would restart in place: hostA alone cannot carry --min-np 2, test_elastic_faults).
    hosts.set_down("hostB")
    try:
        text = job.finish()
    finally:
        hosts.set_up("hostB")
    assert job.proc.returncode == 1, text[-5000:]
    assert "hostB blacklisted for the rest of the job" in text
    verdict = text[text.index("===== elastic job"):]
    assert "job failed: fewer than --min-np 2 slots" in verdict, verdict
    assert "Hosts lost: hostB" in verdict, verdict
    check_membership_log(job, text)
    nothing_left(hosts)


# ---- one host -------------------------------------------------------------------------------

@pytest.mark.slow
def test_one_host_a_killed_instance_is_started_again(tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "elastic_loop.py"])
    job.wait_for_step(12, size=2)
    for pid in job.worker_pids():  # what the launcher gives a worker of the first round
        env = dict(item.split("=", 1) for item in
                   Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
        assert {k: env.get(k) for k in ("HOROVOD_ELASTIC", "HOROVOD_SIZE", "HOROVOD_CONTROLLER",
                                        "HOROVOD_GLOO_TIMEOUT_SECONDS", "POPDIST_NUM_INSTANCES",
                                        "POPRUN_RESTART_COUNT", "TF_CONFIG")} == {
            "HOROVOD_ELASTIC": "1", "HOROVOD_SIZE": "2", "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": "30", "POPDIST_NUM_INSTANCES": "2",
            "POPRUN_RESTART_COUNT": "0", "TF_CONFIG": None}
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"].startswith("127.0.0.1:")
    victim = job.worker_pids()[-1]
    moment = time.time()
    os.kill(victim, signal.SIGKILL)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    result = check_weights(job, loop_reference)
    assert result["size"] == 2
    assert re.search(r"instance \d \(rank \d of 2\) on localhost was killed by SIGKILL", text)
    assert "blacklisted" not in text  # one failed slot on a live host is no host failure
    assert [size for _, size, _ in rounds(text)] == [2, 2]
    logs = sorted(p.name for p in (job.output_dir / "attempt-2").iterdir())
    assert logs == ["instance-3.stderr.log", "instance-3.stdout.log"]
    check_membership_log(job, text)
    print(f"\none host: loss -> next step at size 2: {recovery(text, moment, 2):.2f} s")
    assert wait_gone(job.worker_pids(), timeout=10) == []


def start_env(pid: int) -> dict:
    """The environment a worker was started with (its rank and host in its first round)."""
    return dict(item.split("=", 1) for item in
                Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)


def check_no_step_redone_beyond_the_commit(text: str, moment: float) -> None:
    """Rank 0's steps after ``moment`` (a kill) go on from the last commit before it: nothing
    committed is trained again (the state sync's source held the commit)."""
    before = max(int(n) for n, _, t in STEP.findall(text) if float(t) <= moment)
    after = [n for n, _, _ in steps_after(text, moment)]
    assert after and min(after) > before - COMMIT, (before, after)


@pytest.mark.slow
def test_one_host_rank_0_killed_mid_epoch_the_survivor_is_the_source_of_the_sync(tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "2", "--backend", "local", "--elastic-mode",
                         "horovod", "elastic_loop.py"])
    job.wait_for_step(12, size=2)
    victim = next(p for p in job.worker_pids() if start_env(p)["HOROVOD_RANK"] == "0")
    moment = time.time()
    os.kill(victim, signal.SIGKILL)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    result = check_weights(job, loop_reference)
    # The final rank 0 is the survivor (it went through the reset); the new worker took rank 1.
    assert result["resets"] >= 1 and result["size"] == 2
    check_no_step_redone_beyond_the_commit(text, moment)
    assert re.search(r"instance \d \(rank 0 of 2\) on localhost was killed by SIGKILL", text)
    assert re.search(r"instance \d on localhost was killed by SIGKILL; restarting in place "
                     r"\(failure 1 of --host-failure-limit 3, counted again from 1 after "
                     r"progress\): "
                     r"instance \d's slot is started again \(the other hosts cannot carry "
                     r"--min-np 2\)", text), text[-5000:]
    assert "blacklisted" not in text
    check_membership_log(job, text)
    assert wait_gone(job.worker_pids(), timeout=10) == []


@pytest.mark.slow
def test_the_host_of_rank_0_killed_the_other_host_goes_on_from_the_last_commit(tmp_path):
    # localhost and 127.0.0.1 are two hosts of this machine, as in horovodrun's own tests.
    job = Job(tmp_path, ["-np", "3", "--min-np", "1", "-H", "localhost:2,127.0.0.1:1",
                         "--backend", "local", "--elastic-mode", "horovod", "elastic_loop.py"])
    job.wait_for_step(12, size=3)
    envs = {p: start_env(p) for p in job.worker_pids()}
    victims = [p for p, env in envs.items() if env["HOROVOD_HOSTNAME"] == "localhost"]
    assert sorted(envs[p]["HOROVOD_RANK"] for p in victims) == ["0", "1"]
    moment = time.time()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    result = check_weights(job, loop_reference)  # 3 workers, then 1: the same weights
    assert (result["host"], result["size"]) == (socket.gethostname(), 1)
    check_no_step_redone_beyond_the_commit(text, moment)
    assert [(size, on) for _, size, on in rounds(text)] == [(3, "localhost:2,"), (1, "127.0.0.1:1")]
    assert "localhost blacklisted for the rest of the job" in text
    check_membership_log(job, text)
    assert wait_gone(job.worker_pids(), timeout=10) == []


@pytest.mark.slow
def test_one_host_signals_and_timeout_stop_every_worker(tmp_path):
    """SIGTERM to poprun-lite reaches every worker (exit 143); --timeout collects every
    worker's Python stacks, then stops the job (exit 124); nothing is left either way. The two
    jobs run side by side; at the timeout both workers are in elastic_loop.py (importing
    TensorFlow or training)."""
    args = ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode", "horovod"]
    slow = {"ELASTIC_STEP_SLEEP": "1"}
    timed = Job(tmp_path / "timeout", args + ["--timeout", "15", "elastic_loop.py"], env=slow)
    job = Job(tmp_path / "sigterm", args + ["elastic_loop.py"], env=slow)
    job.wait_for_step(2)
    job.proc.send_signal(signal.SIGTERM)
    text = job.finish()
    assert job.proc.returncode == 128 + signal.SIGTERM, text[-5000:]
    assert "received SIGTERM; forwarding it to 2 instance(s)" in text
    assert "===== elastic job: 1 round(s) =====" in text and "job interrupted (SIGTERM)." in text
    assert wait_gone(job.worker_pids(), timeout=10) == []

    job = timed
    text = job.finish()
    assert job.proc.returncode == 124, text[-5000:]
    stacks = text[text.index("Python stacks of every instance"):]
    # Both workers' stacks. (One still importing TensorFlow shows the import's innermost 100
    # frames, faulthandler's limit, which may stop short of elastic_loop.py.)
    sent = re.findall(r"instance (\d+) \(host localhost\):\n\s+(?:Current thread|Thread) "
                      r"0x[0-9a-f]+ \(most recent call first\)", stacks)
    assert sorted(sent) == ["1", "2"], stacks
    assert wait_gone(job.worker_pids(), timeout=10) == []


@pytest.mark.slow
def test_inside_a_slurm_allocation_a_killed_worker_is_started_again_by_srun(slurm, tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--elastic-mode", "horovod",
                         "--start-timeout", "60", "elastic_loop.py"], env=slurm,
              before=["salloc", "-N1", "-n2"])
    job.wait_for_step(12, size=2)
    os.kill(job.worker_pids()[-1], signal.SIGKILL)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert [size for _, size, _ in rounds(text)] == [2, 2]
    assert re.search(r"instance \d \(rank \d of 2\) on \S+ was killed by SIGKILL", text)
    assert "elastic job (Horovod's driver, backend srun)" in text and "srun: error" not in text
    assert wait_gone(job.worker_pids(), timeout=10) == []


# ---- the open-world Supervisor alone (no Horovod) ---------------------------------------------

OPEN_WORLD_PROGRAM = """
import os, signal, sys, time
tag, ready = os.environ["TAG"], os.environ["READY"]
print("hello from", tag, flush=True)
if tag == "b":  # ignores SIGTERM: only its kill deadline ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(ready, "w").close()
    time.sleep(60)
if tag == "a":
    while not os.path.exists(ready):
        time.sleep(0.02)
    sys.exit(3)
"""


def test_open_world_supervisor_adds_instances_reports_ends_and_stops_one(tmp_path):
    """Instances added while the job runs; each end reported once (not ending the job); one
    instance stopped alone (SIGTERM ignored: SIGKILL after the grace period); the job ends when
    the world is closed; output tagged and logged per round."""
    from popdist_launcher.launcher.layout.backends.local import LocalBackend
    from popdist_launcher.launcher.output.routing import LogFiles, OutputOptions, Router
    from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
    from popdist_launcher.launcher.supervision.attempt import JobState
    from popdist_launcher.launcher.supervision.world import OpenWorld
    from popdist_launcher.launcher.supervision.supervisor import Supervisor

    plan = LaunchPlan(program=(sys.executable, "-c", OPEN_WORLD_PROGRAM), num_instances=0,
                      num_replicas=0, ipus_per_replica=1, instances=(),
                      rendezvous_address="127.0.0.1", rendezvous_port=0, grace_period=1.0)
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    logs = LogFiles(root, str(tmp_path), 7)
    console = tmp_path / "console.txt"
    with open(console, "wb") as out:
        router = Router(0, OutputOptions(), console=(out.fileno(), out.fileno()))
        ends, stopping = [], []

        def ended(inst, how, detail):
            ends.append((inst.name, how, inst.returncode, inst.stopped))
            if inst.name == "instance a":
                world.stop_instance(instances["b"])
            if len(ends) == 3:
                world.close()

        world = OpenWorld(ended, lambda: stopping.append(True))
        supervisor = Supervisor(plan, LocalBackend(), router, world=world)
        trigger, pull = socket.socketpair()
        instances = {}

        def start():
            pull.recv(1)
            supervisor.unwatch(pull)
            for tag in "abc":
                env = {"TAG": tag, "READY": str(tmp_path / "ready")}
                instances[tag] = world.add_instance(Host("localhost", "127.0.0.1"), env, tag, logs)

        supervisor.watch(pull, start)
        trigger.send(b"x")
        result = supervisor.run()
        router.close_all()
    logs.close()
    os.close(root)
    assert result.state is JobState.SUCCEEDED and result.exit_code == 0
    assert sorted(ends) == [("instance a", "exited", 3, False),
                            ("instance b", "exited", -signal.SIGKILL, True),
                            ("instance c", "exited", 0, False)]
    assert stopping == []  # the job itself was never stopped
    text = console.read_text()
    for tag in "abc":
        assert f"[{tag}]<stdout>:hello from {tag}\n" in text
        assert (tmp_path / "attempt-7" / f"instance-{tag}.stdout.log").read_text() == \
            f"hello from {tag}\n"
    assert wait_gone([i.pid for i in instances.values()], timeout=5) == []
