"""Every backend keeps every promise of docs/job-end.md: the same cases through the real CLI on
local (forked wrappers), mpi (mpirun on this host), ssh and mpi across two network-namespace
hosts (tests/netns_hosts.py), and srun inside a one-node Slurm allocation (conftest's ``slurm``).
Each case is one job of tests/programs/behave.py with 4 instances, so it takes seconds."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import List, NamedTuple

import psutil
import pytest

from conftest import LAUNCHER, alive, program, read_pids, wait_for_files, wait_gone
from netns_hosts import TestHosts, require_test_hosts

pytestmark = pytest.mark.slow
BACKENDS = ["local", "mpi", "ssh", "mpi-hosts", "srun"]
NP = 4
JOB_TIMEOUT = 120


class Backend(NamedTuple):
    """How one backend runs ``poprun-lite``: words before it (salloc), options, environment,
    and the host each of the 4 instances runs on (as the report names it)."""

    name: str
    prefix: List[str]
    options: List[str]
    env: dict
    hosts: List[str]
    netns: object = None  # the TestHosts, for the ssh and mpi-hosts backends

    def argv(self, *args: str) -> List[str]:
        return [*self.prefix, *LAUNCHER, *self.options, *args]

    def run(self, *args: str, timeout: float = JOB_TIMEOUT, **kwargs):
        env = dict(self.env, POPRUN_TIMEOUT=f"{timeout * 0.85 - 5:g}")
        try:
            return subprocess.run(self.argv(*args), capture_output=True, text=True, env=env,
                                  timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{self.name}: poprun-lite still ran after {timeout:g} s: "
                        f"{(e.stderr or b'')[-4000:]!r}")

    def start(self, *args: str) -> "Job":
        env = dict(self.env, POPRUN_TIMEOUT=f"{JOB_TIMEOUT * 0.85 - 5:g}")
        return Job(subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env))


class Job:
    """A poprun-lite job in the background; ``launcher`` is poprun-lite's own pid (under salloc,
    salloc's child), the process the tests signal."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self._launcher = None

    @property
    def launcher(self) -> psutil.Process:
        if self._launcher is None:
            top = psutil.Process(self.popen.pid)
            deadline = time.monotonic() + 30
            while top.cmdline()[:len(LAUNCHER)] != LAUNCHER:
                children = top.children()
                if children:
                    top = children[0]
                    continue
                assert time.monotonic() < deadline, "poprun-lite did not start under salloc"
                time.sleep(0.05)
            self._launcher = top
        return self._launcher

    def signal(self, sig: int) -> None:
        self.launcher.send_signal(sig)

    def finish(self, timeout: float = 60):
        try:
            out, err = self.popen.communicate(timeout=timeout)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
        return self.popen.returncode, out, err


@pytest.fixture(scope="module")
def netns_hosts(tmp_path_factory):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path_factory.mktemp("hosts")) as hosts:
        yield hosts


@pytest.fixture(params=BACKENDS)
def backend(request) -> Backend:
    name = request.param
    if name in ("local", "mpi"):
        return Backend(name, [], ["--backend", name], dict(os.environ), ["localhost"] * NP)
    if name in ("ssh", "mpi-hosts"):
        hosts = request.getfixturevalue("netns_hosts")
        return Backend(name, [], ["--backend", "ssh" if name == "ssh" else "mpi",
                                  "-H", "hostA:2,hostB:2", "--ssh-config", hosts.ssh_config,
                                  "--host-subnet", hosts.subnet, "--start-timeout", "60"],
                       dict(os.environ), ["hostA", "hostA", "hostB", "hostB"], hosts)
    env = request.getfixturevalue("slurm")
    node = socket.gethostname().split(".")[0]
    return Backend(name, ["salloc", "-N1", f"-n{NP}", "--quiet"], ["--start-timeout", "60"],
                   env, [node] * NP)


def everything_gone(backend: Backend, pids: List[int], timeout: float = 30) -> None:
    """Nothing of ``pids`` (and, on the namespace hosts, nothing else) is left."""
    assert wait_gone(pids, timeout=timeout) == []
    if backend.netns is not None:
        left = lambda: [p for h in ("hostA", "hostB")  # noqa: E731
                        for p in backend.netns.pids_in(h, include_sshd_sessions=False)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and left():
            time.sleep(0.1)
        assert left() == []


def wrappers_of(pids: List[int]) -> List[int]:
    """The wrapper of each program: its parent."""
    return [psutil.Process(pid).ppid() for pid in pids]


def ready_then_fail(failing: int, how: str) -> List[str]:
    """behave.py actions: instance ``failing`` does ``how`` once every other one is ready."""
    return [*(f"waitfor:ready-{i}@{failing}" for i in range(NP) if i != failing),
            f"{how}@{failing}"]


# ---- exit codes ----------------------------------------------------------------------------

@pytest.mark.parametrize("how, code, words", [
    ("exit:7", 7, "exited with code 7"),
    ("sigkill", 128 + signal.SIGKILL, "was killed by SIGKILL"),
])
def test_the_failing_instance_is_named_with_its_code_and_the_job_exits_with_it(
        backend, pid_dir, how, code, words):
    result = backend.run("-np", str(NP), program("behave.py"), str(pid_dir), "usr1",
                         *ready_then_fail(3, how), "sleep:120")
    assert result.returncode == code, result.stderr[-3000:]
    cause = result.stderr.split("root cause =====", 1)[1]
    assert f"instance 3 {words} (host {backend.hosts[3]})" in cause
    if how.startswith("exit"):
        assert "last 1 line(s) of instance 3's stderr:\n    instance 3 gives up with code 7" \
            in cause
        assert "[3]<stderr>:instance 3 gives up with code 7" in result.stderr
    everything_gone(backend, read_pids(pid_dir, "pid"))


@pytest.mark.parametrize("backend", ["mpi", "mpi-hosts", "srun"], indirect=True)
def test_an_engine_failing_before_any_instance_started_is_named_with_its_words(backend):
    # (local has no engine; ssh's host probe fails first: test_multihost names the host)
    result = backend.run("-np", str(NP), "--mpi-global-args", "--no-such-option", "true",
                         timeout=60)
    assert result.returncode not in (0, 2), result.stderr[-3000:]
    engine = "srun" if backend.name == "srun" else "mpirun"
    cause = result.stderr.split("root cause =====", 1)[1]
    assert f"{engine} exited with code {result.returncode} before instance(s) 0, 1, 2, 3 " \
           f"started" in cause
    assert "no-such-option" in cause.split("its last line(s):", 1)[1]
    assert "Traceback" not in result.stderr


# ---- signals and the grace period ----------------------------------------------------------

def test_sigint_reaches_every_program_and_the_grace_period_lets_it_save(backend, pid_dir):
    # (SIGHUP, which stops a job as SIGINT and SIGTERM do: test_supervision.py, local and mpi)
    sig = signal.SIGINT
    job = backend.start("-np", str(NP), "--grace-period", "20", program("behave.py"),
                        str(pid_dir), "onstop:1", "sleep:120")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(NP)], timeout=60)
    job.signal(sig)
    code, out, err = job.finish()
    assert code == 128 + sig, err[-3000:]
    for i in range(NP):
        assert (pid_dir / f"signal-{i}").read_text() == sig.name  # that signal, no other
        assert (pid_dir / f"saved-{i}").read_text() == "saved"  # 1 s of saving, not cut off


def test_sigterm_reaches_every_program_and_one_that_ignores_it_is_killed_after_the_grace(
        backend, pid_dir):
    job = backend.start("-np", str(NP), "--grace-period", "3", program("behave.py"),
                        str(pid_dir), "onstop:1", "stubborn:1@3", "sleep:120")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(NP)], timeout=60)
    pids = read_pids(pid_dir, "pid")
    wrappers = wrappers_of(pids)
    job.signal(signal.SIGTERM)
    code, out, err = job.finish()
    assert code == 128 + signal.SIGTERM, err[-3000:]
    for i in range(NP):
        assert (pid_dir / f"signal-{i}").read_text() == "SIGTERM"
    assert [(pid_dir / f"saved-{i}").read_text() for i in range(NP - 1)] == ["saved"] * 3
    assert (pid_dir / "still-3").read_text() == "still here"  # not killed with the SIGTERM
    assert not (pid_dir / "saved-3").exists()
    everything_gone(backend, pids + wrappers)  # SIGKILL ended it after the grace period


def test_after_a_failure_the_survivors_get_sigterm_and_the_grace_period(backend, pid_dir):
    result = backend.run("-np", str(NP), "--grace-period", "20", program("behave.py"),
                         str(pid_dir), "onstop:1", *ready_then_fail(3, "exit:4"), "sleep:120")
    assert result.returncode == 4, result.stderr[-3000:]
    assert f"instance 3 exited with code 4 (host {backend.hosts[3]})" in result.stderr
    for i in range(NP - 1):
        assert (pid_dir / f"signal-{i}").read_text() == "SIGTERM"
        assert (pid_dir / f"saved-{i}").read_text() == "saved"


def test_sigusr1_is_forwarded_and_sigquit_prints_every_stack_and_the_job_goes_on(
        backend, pid_dir, tmp_path):
    logs = tmp_path / "logs"
    job = backend.start("-np", str(NP), "--output-dir", str(logs), program("behave.py"),
                        str(pid_dir), "switches", "usr1", "waitfor:go", "exit:0")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(NP)], timeout=60)
    for i in range(NP):  # the wrapper's variable turned them on (the stacks below need it too)
        assert "instance" in (pid_dir / f"switches-{i}").read_text().split(), i
    job.signal(signal.SIGUSR1)
    wait_for_files([pid_dir / f"usr1-{i}" for i in range(NP)])
    job.signal(signal.SIGQUIT)
    wait_for_files([logs / "attempt-0" / f"instance-{i}.stacks.log" for i in range(NP)])
    (pid_dir / "go").write_text("go")
    code, out, err = job.finish()
    assert code == 0, err[-3000:]
    stacks = err.split("Python stacks of every instance (all threads) =====", 1)[1]
    for i in range(NP):
        assert "in <module>" in stacks.split(f"instance {i} (host {backend.hosts[i]}):", 1)[1]


# ---- output --------------------------------------------------------------------------------

def test_output_dir_keeps_a_failed_jobs_logs_and_the_console_is_tagged(backend, pid_dir,
                                                                        tmp_path):
    logs = tmp_path / "logs"
    result = backend.run("-np", str(NP), "--output-dir", str(logs), "--tag-output-host",
                         program("behave.py"), str(pid_dir), "stdout:3", "usr1",
                         *ready_then_fail(2, "exit:5"), "sleep:120")
    assert result.returncode == 5, result.stderr[-3000:]
    # The tag names the host the instance runs on (this host's name, not "localhost").
    tags = [os.uname().nodename if h == "localhost" else h for h in backend.hosts]
    for i, host in enumerate(tags):
        for n in range(3):
            assert f"[{i}@{host}]<stdout>:instance {i} stdout line {n}\n" in result.stdout
        assert (logs / "attempt-0" / f"instance-{i}.stdout.log").read_text() == \
            "".join(f"instance {i} stdout line {n}\n" for n in range(3))  # no tags
    assert f"[2@{tags[2]}]<stderr>:instance 2 gives up with code 5" in result.stderr
    assert (logs / "attempt-0" / "instance-2.stderr.log").read_text() == \
        "instance 2 gives up with code 5\n"


def test_a_reader_of_its_output_that_goes_away_stops_the_job_as_sigterm_does(backend, pid_dir):
    # `poprun-lite ... | head`: the launcher's next write to the pipe is refused (EPIPE; Python
    # ignores SIGPIPE), and, as mpirun does on SIGPIPE, it ends the job: every program gets
    # SIGTERM and the grace period, the exit code is 128+SIGPIPE, and the stop summary still
    # reaches stderr.
    job = backend.start("-np", str(NP), "--grace-period", "20", program("behave.py"),
                        str(pid_dir), "onstop:1", "waitfor:closed", "stdout:3", "sleep:120")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(NP)], timeout=60)
    pids = read_pids(pid_dir, "pid")
    job.popen.stdout.close()
    job.popen.stdout = None  # finish() reads stderr only
    (pid_dir / "closed").write_text("closed")
    code, out, err = job.finish()
    assert code == 128 + signal.SIGPIPE, err[-3000:]
    assert "the reader of its output has gone (SIGPIPE); sending SIGTERM to" in err
    assert "===== job stopped by SIGPIPE =====" in err
    assert "Traceback" not in err
    for i in range(NP):
        assert (pid_dir / f"signal-{i}").read_text() == "SIGTERM"
        assert (pid_dir / f"saved-{i}").read_text() == "saved"
    everything_gone(backend, pids)


def test_closed_standard_descriptors_are_dev_null_and_the_job_runs(backend, pid_dir):
    # `poprun-lite ... <&- >&-`: the job runs and its output is dropped, as a missing stdout is
    # for Python's print; nothing the launcher opens takes descriptor 0 or 1 meanwhile.
    # (Closed by a shell that then becomes poprun-lite: under salloc, closed before salloc,
    # salloc's own files would take those numbers and poprun-lite would inherit them.)
    close = ["sh", "-c", 'exec "$@" <&- >&-', "sh"]
    argv = [*backend.prefix, *close, *LAUNCHER, *backend.options, "-np", str(NP),
            program("behave.py"), str(pid_dir), "stdin", "stdout:3"]
    result = subprocess.run(argv,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(backend.env, POPRUN_TIMEOUT=f"{JOB_TIMEOUT * 0.85 - 5:g}"),
                            timeout=JOB_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert [(pid_dir / f"stdin-{i}").read_text() for i in range(NP)] == [""] * NP


def test_stdin_goes_to_instance_0_only(backend, pid_dir):
    result = backend.run("-np", str(NP), program("behave.py"), str(pid_dir), "stdin",
                         input="first line\nsecond line\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (pid_dir / "stdin-0").read_text() == "first line\nsecond line\n"
    assert [(pid_dir / f"stdin-{i}").read_text() for i in range(1, NP)] == [""] * (NP - 1)


# ---- nothing outlives the job --------------------------------------------------------------

def test_children_and_setsid_daemons_do_not_outlive_the_job(backend, pid_dir):
    result = backend.run("-np", str(NP), program("behave.py"), str(pid_dir), "child", "daemon",
                         "exit:0")
    assert result.returncode == 0, result.stderr[-3000:]
    leftovers = read_pids(pid_dir, "child") + read_pids(pid_dir, "daemon")
    assert len(leftovers) == 2 * NP
    everything_gone(backend, leftovers)


def test_launcher_sigkill_leaves_nothing_of_the_job(backend, pid_dir, tmp_path):
    tmp = tmp_path / "tmp"  # the job's $TMPDIR: the launcher's socket folder, mpirun's session
    tmp.mkdir()
    job = backend._replace(env={**backend.env, "TMPDIR": str(tmp)}).start(
        "-np", str(NP), program("behave.py"), str(pid_dir), "child", "daemon", "usr1", "sleep:120")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(NP)], timeout=60)
    pids = read_pids(pid_dir, "pid") + read_pids(pid_dir, "child") + read_pids(pid_dir, "daemon")
    assert len(pids) == 3 * NP and all(alive(p) for p in pids)
    engines = [p.pid for p in job.launcher.children(recursive=True)]  # mpirun, srun, ssh ...
    wrappers = wrappers_of(read_pids(pid_dir, "pid"))
    # The launcher's socket folder: under $TMPDIR, or /tmp where $TMPDIR is too deep (local
    # wrappers are forked: under local the socket closed once they started).
    sockets = lambda: [*tmp.glob(f"poprun-lite-{job.launcher.pid}-*"),  # noqa: E731
                       *Path("/tmp").glob(f"poprun-lite-{job.launcher.pid}-*")]
    assert len(sockets()) == (backend.name != "local")
    job.launcher.kill()
    job.finish()
    everything_gone(backend, pids + wrappers + engines)
    left = lambda: [p.name for p in tmp.iterdir()  # noqa: E731
                    if not p.name.startswith("poprun-lite-ports-")]
    deadline = time.monotonic() + 30
    while (left() or sockets()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == [] and sockets() == []


def test_a_tmpdir_too_deep_for_a_unix_socket_runs_the_job_and_leaves_nothing_there(
        backend, pid_dir, tmp_path):
    # The launcher's socket (and, under mpirun, Open MPI's session folder) would lie under
    # $TMPDIR; past a socket path's 107 bytes the socket goes to /tmp instead of failing the job
    # with a traceback, and what the job kept under $TMPDIR is removed when it ends (the
    # host-wide port locks, poprun-lite-ports-<uid>, are shared by every launch and stay).
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    result = backend._replace(env={**backend.env, "TMPDIR": str(deep)}).run(
        "-np", str(NP), program("behave.py"), str(pid_dir), "stdout:1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert len(read_pids(pid_dir, "pid")) == NP
    assert [p.name for p in deep.iterdir() if not p.name.startswith("poprun-lite-ports-")] == []


# ---- hangs ---------------------------------------------------------------------------------

def test_timeout_ends_a_hung_job_with_every_instances_stacks(backend, pid_dir, tmp_path):
    # Time for every instance to start and reach hang_here (starting 4 instances over ssh or
    # mpirun across hosts took more than 5 s on a busy 2-core machine).
    limit = "8" if backend.netns is not None else "5"
    logs = tmp_path / "logs"
    result = backend.run("-np", str(NP), "--timeout", limit, "--grace-period", "2",
                         "--output-dir", str(logs), program("behave.py"), str(pid_dir), "hang")
    assert result.returncode == 124, result.stderr[-3000:]
    report = result.stderr.split("root cause =====", 1)[1]
    assert f"the job timeout (--timeout {limit} s) expired" in report
    assert "Python stacks of every instance (all threads) =====" in report, result.stderr[-3000:]
    stacks = report.split("Python stacks of every instance (all threads) =====", 1)[1]
    for i, host in enumerate(backend.hosts):
        own = stacks.split(f"instance {i} (host {host}):", 1)[1].split("poprun-lite:")[0]
        assert "in hang_here" in own and "in side_thread" in own
        saved = (logs / "attempt-0" / f"instance-{i}.stacks.log").read_text()
        assert "in hang_here" in saved and "in side_thread" in saved
    assert wait_gone(read_pids(pid_dir, "pid")) == []


def test_a_hung_instance_is_named_with_its_stack_and_cut(backend):
    """The hang check (docs/elastic.md, 'Hung workers'): instance 3 waits on a lock it holds
    while the others wait in Horovod's allreduce; it is named (index, host), its stack printed,
    and the job fails with it as the root cause, whichever backend started it."""
    import re
    result = backend.run("-np", str(NP), "--hang-timeout", "10", "--grace-period", "2",
                         program("hang_member.py"), "eager", "16", "lock:3:4", timeout=240)
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = re.search(r"instance (\d) \(host ([\w.-]+)\) was hung \(blocked\): (.*?); killed "
                      r"it with SIGKILL", err)
    assert found and found[1] == "3" and found[2] == backend.hosts[3], err[-4000:]
    assert found[3].startswith("no CPU and no I/O for "), found[3]
    assert "main thread in hang at hang_member.py:" in found[3], found[3]
    assert "in collective allreduce" in found[3], found[3]
    assert f"hang check: the Python stacks of instance 3 (host {backend.hosts[3]}, pid " in err
    assert re.search(r'hang_member\.py", line \d+ in hang', err), err[-4000:]
    report = err.split("===== job failed: root cause =====", 1)[1]
    assert "instance 3" in report.splitlines()[1], report[:2000]


# ---- bad input -----------------------------------------------------------------------------

def one_sentence(result, words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith("salloc:")]
    assert len(lines) == 1 and lines[0].startswith("poprun-lite: error:"), result.stderr
    assert words in lines[0], lines[0]


def test_bad_input_is_one_sentence_and_a_non_zero_exit(backend, tmp_path):
    one_sentence(backend.run("-np", str(NP), "no-such-program-here", timeout=60),
                 "program 'no-such-program-here' was not found on PATH")
    one_sentence(backend.run("-np", str(NP), "--num-replicas", "6", "true", timeout=60),
                 "--num-replicas 6 is not divisible by --num-instances 4")
    # More instances than the hosts' slots (the allocation's under srun).
    slots = [] if backend.name in ("ssh", "mpi-hosts", "srun") else ["-H", "localhost:4"]
    one_sentence(backend.run(*slots, "-np", str(NP + 1), "true", timeout=60),
                 "5 instances need 5 slots but")
