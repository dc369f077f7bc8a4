"""Shared helpers: run the real launcher as a user would, and watch the processes it started."""
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, List

import pytest

PROGRAMS = Path(__file__).parent / "programs"


def _keras_2_package() -> str:
    """The package that is Keras 2 in this environment, as popdist_launcher.compat.keras2 chooses
    it: ``keras`` on TensorFlow 2.15, ``tf_keras`` on 2.16+ (read without importing TensorFlow)."""
    from importlib import metadata
    try:
        version = metadata.version("tensorflow-cpu")
    except metadata.PackageNotFoundError:
        version = metadata.version("tensorflow")
    return "keras" if tuple(map(int, version.split(".")[:2])) < (2, 16) else "tf_keras"


KERAS_2 = _keras_2_package()
LAUNCHER = [sys.executable, "-m", "popdist_launcher"]
# The test process itself is a Keras 2 program: tests import the IPU layer's Keras 2 parts in
# process (TensorFlow 2.16+; 2.15's tf.keras breaks with the variable set). The jobs poprun()
# starts get the variable only as the user's environment set it: their programs decide their
# Keras by the project's rule (docs/tensorflow-stacks.md, "Keras per program").
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
_USERS_LEGACY_KERAS = os.environ.get(LEGACY_KERAS)
if KERAS_2 == "tf_keras":
    os.environ.setdefault(LEGACY_KERAS, "1")


def job_environ() -> dict:
    """os.environ as the user's environment gave it to the tests (TF_USE_LEGACY_KERAS included)."""
    env = dict(os.environ)
    if _USERS_LEGACY_KERAS is None:
        env.pop(LEGACY_KERAS, None)
    return env


def poprun(*args: str, timeout: float = 120, env=None, **kwargs) -> subprocess.CompletedProcess:
    """Run ``poprun-lite ARGS`` to completion and capture its output.

    A job that hangs is ended by the launcher's own ``--timeout`` (POPRUN_TIMEOUT) a little before
    ``timeout``: it prints every instance's Python stacks, which the failing assertion then shows.
    """
    env = job_environ() if env is None else dict(env)
    env.setdefault("POPRUN_TIMEOUT", f"{timeout * 0.85 - 5:g}")
    try:
        return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True,
                              timeout=timeout, env=env, **kwargs)
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"poprun-lite {' '.join(args)} still ran after {timeout:g} s (its own "
                    f"--timeout did not end it); its stderr ends:\n{(stderr or '')[-6000:]}")


def poprun_background(*args: str, **kwargs) -> subprocess.Popen:
    kwargs.setdefault("env", job_environ())
    return subprocess.Popen([*LAUNCHER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


def program(name: str) -> str:
    return str(PROGRAMS / name)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or during the read
        return False


def wait_for_files(paths: Iterable[Path], timeout: float = 30) -> None:
    paths = list(paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() and p.stat().st_size for p in paths):
            return
        time.sleep(0.05)
    missing = [str(p) for p in paths if not p.exists()]
    raise AssertionError(f"timed out waiting for {missing}")


def wait_gone(pids: List[int], timeout: float = 10) -> List[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def read_pids(folder: Path, prefix: str) -> List[int]:
    return [int(p.read_text()) for p in sorted(folder.glob(f"{prefix}-*"))]


@pytest.fixture
def pid_dir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    yield d
    # Never leave anything behind, even when a test fails: end what the test's job started.
    for pid in read_pids(d, "pid") + read_pids(d, "child"):
        if alive(pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def horovod_cycle_5ms():
    """Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms (1 by default) to
    negotiate, also while every rank waits. The files whose jobs mostly wait over Gloo (elastic
    rounds, restarts, hung ranks) use it: what they test is membership, recovery and hang
    verdicts, not a collective's latency, and 5 ms (a user's knob, as ``-x`` or in the
    environment) spares the suite's 2-core machine the idle cycling (docs/contributing.md).
    Their few jobs on the mpi backend then run at 5 ms too: a cycle time the user's environment
    sets wins over the launcher's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOROVOD_CYCLE_TIME", "5")
        yield


SLURM_LOCAL = Path(__file__).resolve().parent.parent / "scripts" / "slurm-local.sh"


def _free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster for the module's tests: the environment that reaches it."""
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests need root to run a one-node cluster (scripts/slurm-local.sh); "
                    "run `make test` as root", pytrace=False)
    folder = Path("/tmp") / f"poprun-slurm-{os.getpid()}"  # munged needs a world-enterable path
    # Ports of its own, so that clusters of concurrent test runs never meet.
    ports = dict(os.environ, SLURM_LOCAL_CTLD_PORT=str(_free_port()),
                 SLURM_LOCAL_SLURMD_PORT=str(_free_port()))
    started = subprocess.run(["bash", str(SLURM_LOCAL), "start", str(folder)],
                             capture_output=True, text=True, timeout=900, env=ports)
    assert started.returncode == 0, started.stderr[-3000:]
    env = dict(os.environ, SLURM_CONF=str(folder / "slurm.conf"))
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SLURM_LOCAL), "stop", str(folder)],
                       capture_output=True, timeout=120, env=ports)
        shutil.rmtree(folder, ignore_errors=True)


# Test files that run for minutes (their test times on a shared 2-core machine, measured
# 2026-11-29; docs/contributing.md): `make test` hands them to the xdist workers first
# (`--dist loadfile --no-loadscope-reorder`), so that short files, not a long one started last,
# end the run. The other files follow by their number of tests, most first (xdist's own order).
# Add a file here when it runs for minutes.
LONG_FILES = ("test_strategies.py", "test_hang_check.py", "test_estimator.py",
              "test_elastic_scenarios.py", "test_elastic_horovod.py", "test_backend_promises.py",
              "test_hang_kinds.py", "test_estimator_steps.py", "test_gc_conformance.py")


@pytest.hookimpl(trylast=True)  # after pytest's own order of the tests inside each file
def pytest_collection_modifyitems(items):
    files = {}
    for item in items:
        files.setdefault(item.path, []).append(item)

    def rank(path):
        first = LONG_FILES.index(path.name) if path.name in LONG_FILES else len(LONG_FILES)
        return first, -len(files[path])
    items[:] = [item for path in sorted(files, key=rank) for item in files[path]]


# The suite's CPU by test file (docs/contributing.md, "Where the suite's CPU goes"): with
# SUITE_CPU_LOG=FOLDER, each test's CPU seconds go to FOLDER/<worker pid>.jsonl and the run ends
# with the files that used the most. A test's CPU is the test process's own plus that of the
# processes it started and waited for (the launcher, and through it every instance it reaped);
# a module fixture's job counts for the test that first asked for it. Processes that sshd or
# slurmd started are not the test's children and are not counted.
CPU_LOG = os.environ.get("SUITE_CPU_LOG")


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config):
    if CPU_LOG and not hasattr(config, "workerinput"):  # the controller: a fresh log
        folder = Path(CPU_LOG)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.jsonl"):
            old.unlink()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    record = {"test": item.nodeid, "cpu_s": round(_cpu_seconds() - cpu, 2),
              "wall_s": round(time.monotonic() - wall, 2)}
    with open(Path(CPU_LOG) / f"{os.getpid()}.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")


def pytest_terminal_summary(terminalreporter, config):
    if not CPU_LOG or hasattr(config, "workerinput"):
        return
    files = {}
    for log in Path(CPU_LOG).glob("*.jsonl"):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            name = record["test"].split("::")[0]
            cpu, wall, tests = files.get(name, (0.0, 0.0, 0))
            files[name] = (cpu + record["cpu_s"], wall + record["wall_s"], tests + 1)
    total = sum(cpu for cpu, _, _ in files.values())
    terminalreporter.write_sep("=", f"CPU by test file ({total:.0f} CPU s in all; {CPU_LOG})")
    for name, (cpu, wall, tests) in sorted(files.items(), key=lambda f: -f[1][0])[:25]:
        terminalreporter.write_line(f"{cpu:8.1f} CPU s {wall:8.1f} s  {tests:4d} tests  {name}")
