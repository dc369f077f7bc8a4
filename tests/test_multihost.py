"""Beyond one machine: two test hosts as network namespaces with their own sshd (tests/netns_hosts),
real training over ssh and over mpirun, faults across hosts, and restarts."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import pytest

from conftest import LAUNCHER, job_environ, poprun, poprun_background, program, read_pids, \
    wait_for_files, wait_gone
from netns_hosts import TestHosts, require_test_hosts

pytestmark = pytest.mark.slow
HOSTS = "hostA:2,hostB:2"


@pytest.fixture
def hosts(tmp_path):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as test_hosts:
        yield test_hosts


def over_ssh(hosts, *args):
    return ["-H", HOSTS, "--ssh-config", hosts.ssh_config, "--host-subnet", hosts.subnet, *args]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    result = poprun("-np", "1", "tests/workers/train_equivalence.py", "reference", "none", str(out),
                    timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "reference-0.json").read_text())["history"]


@pytest.mark.parametrize("backend", ["ssh", "mpi"])
def test_training_across_two_hosts_matches_one_process(hosts, reference, tmp_path, backend):
    result = poprun("-np", "4", *over_ssh(hosts, "--backend", backend, "--start-timeout", "60"),
                    "tests/workers/train_equivalence.py", "tf2", "popdist", str(tmp_path),
                    timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"tf2-{i}.json").read_text()) for i in range(4)]
    assert [r["hostname"] for r in runs] == ["hostA", "hostA", "hostB", "hostB"]
    for step, ref in enumerate(reference):
        for i in range(1, 4):
            assert runs[i]["history"][step] == runs[0]["history"][step], \
                f"instance {i}, step {step}"
        np.testing.assert_allclose(runs[0]["history"][step], ref, rtol=1e-6, atol=1e-6)


def test_topology_shows_hosts_and_ssh_commands(hosts):
    result = poprun("-np", "4", *over_ssh(hosts), "--print-topology", "python", "-c", "pass")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"hostA ({hosts.address('hostA')}, eth0, 2 instance(s))" in out
    assert f"hostB ({hosts.address('hostB')}, eth0, 2 instance(s))" in out
    assert "backend ssh" in out and "BatchMode=yes" in out
    assert f"HOROVOD_GLOO_RENDEZVOUS_ADDR={hosts.launcher_address}" in out
    assert out.count("command of instance") == 4


@pytest.mark.parametrize("backend", ["ssh", "mpi"])
def test_a_host_that_stops_answering_mid_job_ends_the_job(hosts, pid_dir, backend):
    # Cut from the network, hostB sends no FIN or RST: only the wrapper connections' keepalive
    # tells the launcher (without it the job waited for ever), and hostB's wrappers end their
    # programs the same way. Under mpirun too: hostB's ranks reach the launcher over TCP, not
    # through its Unix socket's path, which the namespace hosts share (mpirun noticed the lost
    # host only ~40 s later).
    job = poprun_background("-np", "4", *over_ssh(hosts, "--backend", backend),
                            program("behave.py"), str(pid_dir), "sleep:300")
    try:
        wait_for_files([pid_dir / f"pid-{i}" for i in range(4)], timeout=60)
        hosts.set_down("hostB")
        out, err = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
        hosts.set_up("hostB")
    assert job.returncode == 1, err
    assert "job failed: root cause" in err, err
    cause = err[err.index("job failed: root cause"):].splitlines()[1]
    assert "(host hostB) was lost: its host stopped answering" in cause, err
    assert "Traceback" not in err
    assert wait_gone(read_pids(pid_dir, "pid")[:2], timeout=15) == []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and hosts.pids_in("hostB", include_sshd_sessions=False):
        time.sleep(0.2)
    assert hosts.pids_in("hostB", include_sshd_sessions=False) == []


def test_a_host_that_does_not_answer_is_named_within_the_start_timeout(hosts):
    hosts.set_down("hostB")
    start = time.monotonic()
    result = poprun("-np", "4", *over_ssh(hosts, "--start-timeout", "3"), "python", "-c", "pass",
                    timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - start < 30
    assert ("hostB" in result.stderr
            and "hostA" not in result.stderr.split("error:")[-1].split(";")[0])
    assert "start-timeout" in result.stderr
    assert "Traceback" not in result.stderr


@contextlib.contextmanager
def beside(*args: str, timeout: float = 300):
    """``poprun-lite ARGS`` in the background while the block runs (the uninterrupted run a
    restarted one is compared with, its output in a file); waited for on the way out, killed if
    it still runs then. Yields an object whose ``returncode`` and ``stderr`` are set once it
    ended."""
    env = {**job_environ(), "POPRUN_TIMEOUT": f"{timeout - 10:g}"}
    ended = types.SimpleNamespace(returncode=None, stderr="")
    with tempfile.TemporaryFile() as err:
        job = subprocess.Popen([*LAUNCHER, *args], stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            yield ended
            ended.returncode = job.wait(timeout=timeout)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
            err.seek(0)
            ended.stderr = err.read().decode(errors="replace")


def test_restart_resumes_from_the_checkpoint_with_the_same_final_weights(tmp_path):
    steps = "8"
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    for d in (clean, resumed):
        (d / "ckpt").mkdir(parents=True)
    with beside("-np", "2", "tests/workers/restart_training.py", str(clean),
                str(clean / "ckpt"), steps) as uninterrupted:
        result = poprun("-np", "2", "--max-restarts", "1", "tests/workers/restart_training.py",
                        str(resumed), str(resumed / "ckpt"), steps, "3", timeout=300)
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restarting the job on every host (restart 1 of 1" in result.stderr
    finals = [json.loads((resumed / f"final-{i}.json").read_text()) for i in range(2)]
    expected = json.loads((clean / "final-0.json").read_text())
    assert [f["attempt"] for f in finals] == [1, 1]
    assert finals[0]["resumed_at"] == finals[1]["resumed_at"] in (2, 3)
    for f in finals:
        np.testing.assert_allclose(f["w"], expected["w"], rtol=1e-6, atol=1e-7)


def test_max_restarts_gives_up_with_the_failure_exit_code(tmp_path, pid_dir):
    result = poprun("-np", "2", "--max-restarts", "2", program("behave.py"), str(pid_dir),
                    "exit:5@1", timeout=120)
    assert result.returncode == 5
    assert result.stderr.count("restarting the job") == 2


def test_restart_across_hosts_resumes_with_the_same_final_weights(hosts, tmp_path):
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    for d in (clean, resumed):
        (d / "ckpt").mkdir(parents=True)
    two_hosts = ("-np", "2", "-H", "hostA:1,hostB:1", "--ssh-config", hosts.ssh_config,
                 "--host-subnet", hosts.subnet)
    with beside(*two_hosts, "tests/workers/restart_training.py", str(clean),
                str(clean / "ckpt"), "6") as uninterrupted:
        result = poprun(*two_hosts, "--max-restarts", "1", "tests/workers/restart_training.py",
                        str(resumed), str(resumed / "ckpt"), "6", "2", timeout=300)
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "instance 1 was killed by SIGKILL (host hostB)" in result.stderr
    assert "restarting the job on every host (restart 1 of 1" in result.stderr
    expected = json.loads((clean / "final-0.json").read_text())
    for i in range(2):
        final = json.loads((resumed / f"final-{i}.json").read_text())
        assert final["attempt"] == 1 and final["resumed_at"] in (1, 2)
        np.testing.assert_allclose(final["w"], expected["w"], rtol=1e-6, atol=1e-7)


def test_rendezvous_answers_only_the_jobs_hosts(tmp_path):
    require_test_hosts()
    show = ("import os, time; print('PORT', os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT'], "
            "flush=True); time.sleep(60)")
    with TestHosts(names=("hostA", "hostB", "hostC"), workdir=tmp_path) as hosts:
        job = poprun_background("-np", "2", *over_ssh(hosts)[2:], "-H", "hostA:1,hostB:1",
                                "python", "-c", show)
        try:
            line = job.stdout.readline()
            port = line.split("PORT", 1)[1].split()[0]
            url = f"http://{hosts.launcher_address}:{port}/global/missing"
            probe = ("import sys, urllib.request, urllib.error\n"
                     "try:\n    urllib.request.urlopen(sys.argv[1], timeout=10)\n"
                     "except urllib.error.HTTPError as e:\n    print('HTTP', e.code)\n"
                     "except Exception as e:\n    print('REFUSED', type(e).__name__)\n")
            outsider = hosts.exec("hostC", [sys.executable, "-c", probe, url], timeout=60)
            member = hosts.exec("hostA", [sys.executable, "-c", probe, url], timeout=60)
        finally:
            job.send_signal(signal.SIGTERM)
            job.communicate(timeout=60)
    assert outsider.stdout.startswith("REFUSED"), outsider.stdout + outsider.stderr
    assert member.stdout.startswith("HTTP"), member.stdout + member.stderr


def test_warns_when_a_host_name_resolves_to_loopback(hosts):
    hosts_file = f"/etc/netns/{hosts.netns('hostB')}/hosts"
    with open(hosts_file, "w") as f:  # same inode: the namespace's bind mount sees it
        f.write("127.0.0.1 localhost\n127.0.1.1 hostB\n")
    result = poprun("-np", "4", *over_ssh(hosts), "--print-topology", "python", "-c", "pass")
    assert result.returncode == 0, result.stderr
    assert "warning: on hostB, the host name 'hostB' resolves to 127.0.1.1" in result.stderr
    assert "hostA" not in result.stderr


@pytest.mark.parametrize("backend", ["ssh", "mpi"])
def test_across_hosts_the_launcher_supervises_every_instance(hosts, pid_dir, tmp_path, backend):
    # The failing instance on hostB is named with its own stderr; the survivors on both hosts
    # get SIGTERM and the whole grace period; setsid() daemons on either host do not outlive the
    # job; stdin reaches instance 0 on hostA.
    logs = tmp_path / "logs"
    result = poprun("-np", "4", *over_ssh(hosts, "--backend", backend, "--grace-period", "20",
                                          "--output-dir", str(logs)),
                    program("behave.py"), str(pid_dir), "stdin", "daemon", "onstop:2",
                    *(f"waitfor:ready-{i}@3" for i in range(3)), "exit:7@3", "sleep:120",
                    input="to instance 0\n", timeout=300)
    assert result.returncode == 7, result.stderr[-3000:]
    cause = result.stderr.split("root cause =====", 1)[1]
    assert "instance 3 exited with code 7 (host hostB)" in cause
    assert "    instance 3 gives up with code 7" in cause
    for i in (0, 1, 2):
        assert (pid_dir / f"signal-{i}").read_text() == "SIGTERM"
        assert (pid_dir / f"saved-{i}").read_text() == "saved"
    assert (pid_dir / "stdin-0").read_text() == "to instance 0\n"
    assert [(pid_dir / f"stdin-{i}").read_text() for i in (1, 2, 3)] == ["", "", ""]
    assert wait_gone(read_pids(pid_dir, "daemon") + read_pids(pid_dir, "pid"), timeout=15) == []
    assert "gives up with code 7" in (logs / "attempt-0" / "instance-3.stderr.log").read_text()


def test_kubernetes_mpijob_agent_and_hostfile(hosts, tmp_path):
    """A Kubernetes MPIJob's launcher pod: a hostfile of "NAME slots=N" lines and
    OMPI_MCA_plm_rsh_agent naming a kubexec-style script (AGENT HOST COMMAND, stdin not carried).
    poprun-lite picks mpirun, leaves the agent to it, probes the hosts through it, and every
    instance runs on its host."""
    log = tmp_path / "agent.log"
    agent = tmp_path / "kubexec.sh"
    agent.write_text("#!/bin/sh\n# like the MPI operator's kubexec.sh: POD COMMAND...\n"
                     f'pod=$1; shift\necho "$pod" >> {log}\n'
                     f'exec ssh -F {hosts.ssh_config} -o BatchMode=yes "$pod" "$*" </dev/null\n')
    agent.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    a, b = hosts.address("hostA"), hosts.address("hostB")
    hostfile.write_text(f"{a} slots=2\n{b} slots=2\n")
    env = dict(os.environ, OMPI_MCA_plm_rsh_agent=str(agent))
    shown = poprun("--hostfile", str(hostfile), "--print-topology", "python", "-c", "pass",
                   env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "backend mpirun" in shown.stdout
    assert f"plm_ssh_agent {agent}" in shown.stdout and "BatchMode" not in shown.stdout
    code = ("import os; print('net', os.environ['POPDIST_INSTANCE_INDEX'], "
            "os.readlink('/proc/self/ns/net'), flush=True)")
    result = poprun("--hostfile", str(hostfile), "--start-timeout", "60", "python", "-c", code,
                    env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    words = [line.partition(":")[2].split() for line in result.stdout.splitlines()]
    seen = {w[1]: w[2] for w in words if len(w) == 3 and w[0] == "net"}
    assert sorted(seen) == ["0", "1", "2", "3"], result.stdout
    assert seen["0"] == seen["1"] != seen["2"] == seen["3"], seen
    assert os.readlink("/proc/self/ns/net") not in seen.values()  # none ran on the launcher's
    used = set(log.read_text().split())
    assert used == {a, b}, used
