"""The early engine start (launcher/fast_start.py): which commands take it, that the supervisor
adopts the engine it started (one mpirun per job), and that bad input or a signal while the
launcher loads leaves nothing of it behind; the plainest command run without click
(launcher/plain_job.py) with exactly the options click would give it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import LAUNCHER, alive, poprun, program, wait_gone
from popdist_launcher.launch import cli
from popdist_launcher.launcher import fast_start, plain_job, topology
from popdist_launcher.launcher.backends.base import Wiring
from popdist_launcher.launcher.plan import build_plan
from popdist_launcher.launcher.spawned import protocol

PLAIN = {k: v for k, v in os.environ.items()
         if not k.startswith("POPRUN_") and k != "SLURM_JOB_ID"}
needs_mpi = pytest.mark.skipif(not fast_start.mpi_transport_available(),
                               reason="the early start is for the mpi backend")


@needs_mpi
@pytest.mark.parametrize("argv, env, expected", [
    (["-np", "4", "prog"], {}, 4),
    (["--num-instances", "2", "prog", "-np", "9", "--x"], {}, 2),
    (["-np", "1", "prog"], {}, None),                     # one instance: the local backend
    (["-np", "2", "--backend", "mpi", "prog"], {}, None),  # any option
    (["-np", "2", "--", "prog"], {}, None),
    (["-np=2", "prog"], {}, None),
    (["-np", "٢", "prog"], {}, None),                     # a digit, but not click's number
    (["-np", "5000", "prog"], {}, None),
    (["prog", "-np", "2"], {}, None),
    (["-np", "2", "prog"], {"POPRUN_START_TIMEOUT": "30"}, None),  # options from the environment
    (["-np", "2", "prog"], {"SLURM_JOB_ID": "7"}, None),
])
def test_only_plain_commands_start_early(argv, env, expected):
    assert fast_start.plain_instances(argv, {**PLAIN, **env}) == expected


@pytest.mark.parametrize("argv", [
    ["-np", "4", "prog"], ["-np", "1", "prog.py", "a", "--b", "-np", "3"],
    ["--num-instances", "12", "prog", "--help"], ["-np", "007", "x", "-"],
])
def test_a_plain_command_gets_the_values_click_gives_it(argv, monkeypatch):
    for name in list(os.environ):
        if name.startswith("POPRUN_"):
            monkeypatch.delenv(name)
    parsed = cli.make_context("poprun-lite", list(argv), auto_envvar_prefix="POPRUN").params
    assert plain_job.params(argv, PLAIN) == parsed


@pytest.mark.parametrize("argv, env", [
    (["-np", "2", "--tag-output", "prog"], {}), (["-np", "2", "--", "prog"], {}),
    (["-np", "2"], {}), (["prog", "-np", "2"], {}), (["-np", "٢", "prog"], {}),
    (["-np", "2", "prog"], {"POPRUN_GRACE_PERIOD": "1"}),
])
def test_other_commands_go_through_the_cli(argv, env):
    assert plain_job.params(argv, {**PLAIN, **env}) is None


def test_a_plain_job_imports_no_click_and_a_refused_one_is_reported_by_the_cli():
    env = {**PLAIN, "PYTHONPROFILEIMPORTTIME": "1"}
    result = poprun("-np", "2", sys.executable, "-c", "print('ran')", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("ran") == 2
    launcher_imports = [line for line in result.stderr.splitlines()
                        if line.startswith("import time:")]
    assert any("popdist_launcher.launcher.plain_job" in line for line in launcher_imports)
    assert not [line for line in launcher_imports if line.split("|")[-1].strip() == "click"]
    refused = poprun("-np", "2", "--num-replicas", "3", "no-such-program-here", env=PLAIN)
    plain = poprun("-np", "0", "no-such-program-here", env=PLAIN)
    assert refused.returncode == plain.returncode == 2
    assert plain.stderr.strip().splitlines() == [
        "poprun-lite: error: --num-instances must be at least 1, got 0; pass how many processes "
        "to start, e.g. -np 4. (see poprun-lite --help)"]
    too_many = poprun("-np", "65537", sys.executable, "-c", "pass", env=PLAIN)
    assert too_many.returncode == 2 and "--num-instances must be at most 65536" in too_many.stderr


@needs_mpi
def test_the_early_command_is_the_mpi_backends(tmp_path):
    # The command the launcher itself would start for a plain job, with the CLI's defaults.
    defaults = {p.name: p.default for p in cli.params}
    layout = topology.choose(3, environ=PLAIN)
    plan = build_plan(("prog",), 3, [1, 2, 3], ("127.0.0.1", 9), counts=[3],
                      start_timeout=defaults["start_timeout"])
    path = str(tmp_path / "launcher.sock")
    (launch,) = layout.backend.launches(plan, Wiring(path, None, plan.start_timeout), "s3cr3t")
    assert launch.argv == tuple(fast_start.plain_command(3, fast_start.find_mpirun(), path))
    assert fast_start.SECRET_ENV == protocol.SECRET_ENV
    assert fast_start.START_TIMEOUT == defaults["start_timeout"]


def stand_in_mpirun(tmp_path):
    """An mpirun on PATH that records each start (its pid) and then is the real one."""
    real = os.path.join(os.path.dirname(sys.executable), "mpirun")
    fake = tmp_path / "mpirun"
    fake.write_text(f"#!/bin/sh\necho $$ >> {tmp_path}/starts\nexec {real} \"$@\"\n")
    fake.chmod(0o755)
    os.symlink(os.path.join(os.path.dirname(real), "ompi_info"), tmp_path / "ompi_info")
    return {**PLAIN, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}


def starts(tmp_path):
    path = tmp_path / "starts"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def no_trace_of(launcher_pid: int, timeout: float = 10) -> bool:
    """Whether the launcher's socket folder is gone and, within ``timeout``, every process whose
    command line names it (its wrappers)."""
    mark = f"poprun-lite-{launcher_pid}-"
    base = os.environ.get("TMPDIR") or "/tmp"
    if any(name.startswith(mark) for name in os.listdir(base)):
        return False
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if mark.encode() in f.read() and alive(int(name)):
                        found.append(name)
            except (OSError, ValueError):
                pass
        if not found or time.monotonic() > deadline:
            return not found
        time.sleep(0.05)


@needs_mpi
def test_a_plain_job_runs_on_the_engine_started_early(tmp_path):
    env = stand_in_mpirun(tmp_path)
    result = poprun("-np", "2", program("dump_env.py"), str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    assert len(starts(tmp_path)) == 1, result.stderr  # adopted: not killed and started again
    for index in range(2):
        seen = json.loads((tmp_path / f"instance-{index}.json").read_text())
        assert seen["POPDIST_INSTANCE_INDEX"] == str(index)
        assert seen["HOROVOD_CONTROLLER"] == "mpi"
        assert protocol.SECRET_ENV not in seen


@needs_mpi
def test_bad_input_kills_the_early_engine_before_the_report(tmp_path):
    env = stand_in_mpirun(tmp_path)
    job = subprocess.Popen([*LAUNCHER, "-np", "2", "no-such-program-here"], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 2, err
    assert err.strip().splitlines() == [
        "poprun-lite: error: program 'no-such-program-here' was not found on PATH; give a path "
        "to it, or a .py script. (see poprun-lite --help)"]
    assert len(starts(tmp_path)) <= 1  # started early, then killed and reaped by the launcher
    assert not [pid for pid in starts(tmp_path) if alive(pid)]
    assert no_trace_of(job.pid)


@needs_mpi
def test_the_supervisor_takes_the_early_engine_only_for_its_own_command(monkeypatch):
    # A real early mpirun for 2 instances: a plan for 2 takes it; a plan for 3 kills it (mpirun
    # reaped, its wrappers gone, its socket folder removed) and starts its own.
    layouts = {n: topology.choose(n, environ=PLAIN) for n in (2, 3)}
    plans = {n: build_plan(("prog",), n, list(range(1, n + 1)), ("127.0.0.1", 9), counts=[n],
                           start_timeout=fast_start.START_TIMEOUT) for n in (2, 3)}
    for n, taken in ((2, True), (3, False)):
        early = fast_start.EarlyEngine(2, fast_start.find_mpirun(), dict(os.environ), set())
        monkeypatch.setattr(fast_start, "_early", early)
        deadline = time.monotonic() + 30
        while len(fast_start._children(early.process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)  # its wrappers run (and connect) before the supervisor decides
        assert (fast_start.take(layouts[n].backend, plans[n]) is early) is taken
        assert fast_start._early is None
        if taken:
            early.kill()
        assert early.process.returncode is not None and not os.path.exists(early.folder)
        assert no_trace_of(os.getpid())


@needs_mpi
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                    signal.SIGUSR1])
def test_a_signal_while_the_launcher_loads_leaves_nothing_behind(tmp_path, signum):
    # The signal comes as soon as the early mpirun exists: while the launcher loads, or, on a
    # fast machine, once its supervisor runs the job; either way nothing of the job is left.
    env = stand_in_mpirun(tmp_path)
    job = subprocess.Popen([*LAUNCHER, "-np", "2", program("dump_env.py"), str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while not starts(tmp_path) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    job.send_signal(signum)
    _, err = job.communicate(timeout=60)
    assert job.returncode in (-signum, 128 + signum), err  # killed by it, or ended on it
    assert b"Traceback" not in err, err
    assert wait_gone(starts(tmp_path)) == []
    assert no_trace_of(job.pid)
