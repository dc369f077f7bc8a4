"""The launcher as a user meets it: real processes started through the CLI, no TensorFlow."""
import json
import os
import re
import signal
import sys
import time

import pytest

from conftest import (alive, poprun, poprun_background, program, read_pids, wait_for_files,
                      wait_gone)


@pytest.mark.parametrize("backend, controller", [("auto", "mpi"), ("local", "gloo")])
def test_environment_contract_np4_replicas8(tmp_path, backend, controller):
    # auto: this venv has Open MPI and a Horovod that links it, so a local job runs under
    # mpirun with Horovod over MPI; --backend local starts the processes itself, Horovod on Gloo.
    result = poprun("-np", "4", "--num-replicas", "8", "--ipus-per-replica", "2", "--backend",
                    backend, "-x", "MY_FLAG=on", program("dump_env.py"), str(tmp_path))
    assert result.returncode == 0, result.stderr
    envs = [json.loads((tmp_path / f"instance-{i}.json").read_text()) for i in range(4)]
    ports = set()
    for i, env in enumerate(envs):
        assert env["POPDIST_NUM_TOTAL_REPLICAS"] == "8"
        assert env["POPDIST_NUM_LOCAL_REPLICAS"] == "2"
        assert env["POPDIST_REPLICA_INDEX_OFFSET"] == str(2 * i)
        assert env["POPDIST_NUM_IPUS_PER_REPLICA"] == "2"
        assert env["POPDIST_LOCAL_INSTANCE_INDEX"] == str(i)
        assert env["POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"] == "1"
        assert env["POPDIST_NUM_INSTANCES"] == "4"
        assert env["POPDIST_INSTANCE_INDEX"] == str(i)
        assert env["MY_FLAG"] == "on"
        assert env["POPRUN_JOB_ID"] == envs[0]["POPRUN_JOB_ID"] != ""  # one id for the job
        assert env["HOROVOD_RANK"] == str(i) and env["HOROVOD_SIZE"] == "4"
        assert env["HOROVOD_LOCAL_RANK"] == str(i) and env["HOROVOD_LOCAL_SIZE"] == "4"
        assert env["HOROVOD_CROSS_RANK"] == "0" and env["HOROVOD_CROSS_SIZE"] == "1"
        assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == controller
        if controller == "gloo":
            assert int(env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0
            assert "HOROVOD_FUSION_THRESHOLD" not in env  # Horovod's defaults over Gloo
            assert "HOROVOD_CYCLE_TIME" not in env
        else:  # mpirun is the rendezvous
            assert "HOROVOD_GLOO_RENDEZVOUS_PORT" not in env
            assert env["HOROVOD_FUSION_THRESHOLD"] == str(16 << 20)  # the measured settings
            assert env["HOROVOD_CYCLE_TIME"] == "0.1"
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": i}
        assert tf_config == {"cluster": json.loads(envs[0]["TF_CONFIG"])["cluster"],
                             "task": {"type": "worker", "index": i}}
        ports.add(int(tf_config["cluster"]["worker"][i].rsplit(":", 1)[1]))
    assert len(ports) == 4  # every worker has its own port


def test_exit_code_of_first_failure_is_the_jobs(tmp_path, pid_dir):
    start = time.monotonic()
    result = poprun("-np", "4", program("behave.py"), str(pid_dir), "exit:7@2", "sleep:60")
    assert result.returncode == 7
    assert time.monotonic() - start < 30  # the others were stopped, not waited for
    assert "instance 2 exited with code 7" in result.stderr
    assert "root cause" in result.stderr
    assert "instance 2 gives up with code 7" in result.stderr  # its last stderr lines
    assert wait_gone(read_pids(pid_dir, "pid")) == []



def test_instance_killed_by_sigkill_ends_job_with_summary(pid_dir):
    start = time.monotonic()
    result = poprun("-np", "3", "--grace-period", "2", program("behave.py"), str(pid_dir),
                    "sleep:0.5", "sigkill@1", "sleep:60")
    assert result.returncode == 128 + signal.SIGKILL
    assert time.monotonic() - start < 20
    assert "instance 1 was killed by SIGKILL" in result.stderr
    assert wait_gone(read_pids(pid_dir, "pid")) == []


def test_sigint_to_launcher_leaves_no_process(pid_dir):
    job = poprun_background("-np", "3", program("behave.py"), str(pid_dir), "child", "sleep:120")
    wait_for_files([pid_dir / f"child-{i}" for i in range(3)])
    pids = read_pids(pid_dir, "pid") + read_pids(pid_dir, "child")
    assert len(pids) == 6 and all(alive(p) for p in pids)
    job.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=30)
    assert job.returncode == 128 + signal.SIGINT, err
    assert "received SIGINT" in err
    assert wait_gone(pids) == []


def test_launcher_sigkill_leaves_no_process(pid_dir):
    job = poprun_background("-np", "3", program("behave.py"), str(pid_dir), "child", "sleep:120")
    wait_for_files([pid_dir / f"child-{i}" for i in range(3)])
    pids = read_pids(pid_dir, "pid") + read_pids(pid_dir, "child")
    job.kill()
    job.wait(timeout=10)
    assert wait_gone(pids) == [], "instances outlived the launcher"


def test_sigusr1_is_forwarded_and_job_goes_on(pid_dir):
    # each instance carries on until its signal was recorded, then ends by itself
    job = poprun_background("-np", "2", program("behave.py"), str(pid_dir), "usr1",
                            "waitfor:usr1-0@0", "waitfor:usr1-1@1")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(2)])
    job.send_signal(signal.SIGUSR1)
    out, err = job.communicate(timeout=30)
    assert job.returncode == 0, err
    assert (pid_dir / "usr1-0").read_text() == "got it"
    assert (pid_dir / "usr1-1").read_text() == "got it"


def test_output_lines_never_interleave(pid_dir):
    result = poprun("-np", "4", program("behave.py"), str(pid_dir), "lines:3000")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 * 3000
    pattern = re.compile(r"^\[(\d)\]<stdout>:(\d) (\d+) (\d)+$")
    seen = {i: 0 for i in range(4)}
    for line in lines:
        match = pattern.match(line)
        assert match, f"mangled line: {line[:80]}..."
        tag, index, number = int(match.group(1)), int(match.group(2)), int(match.group(3))
        assert tag == index and line.endswith(str(index) * 700)
        assert number == seen[index]  # in order, none lost
        seen[index] += 1


def test_only_output_from_instance(pid_dir):
    result = poprun("-np", "3", "--only-output-from-instance", "1", program("behave.py"),
                    str(pid_dir), "lines:5")
    assert result.returncode == 0, result.stderr
    tags = {line.split("]")[0] for line in result.stdout.splitlines()}
    assert tags == {"[1"}
    assert len(result.stdout.splitlines()) == 5


def test_no_tag_output_and_output_dir(tmp_path, pid_dir):
    out_dir = tmp_path / "logs"
    result = poprun("-np", "2", "--no-tag-output", "--output-dir", str(out_dir),
                    program("behave.py"), str(pid_dir), "lines:3", "exit:0@1")
    assert result.returncode == 0, result.stderr
    assert not any(line.startswith("[") for line in result.stdout.splitlines())
    for i in range(2):
        stdout = (out_dir / "attempt-0" / f"instance-{i}.stdout.log").read_text().splitlines()
        assert len(stdout) == 3 and all(line.startswith(f"{i} ") for line in stdout)
    assert "gives up with code 0" in (out_dir / "attempt-0" / "instance-1.stderr.log").read_text()
    assert (out_dir / "attempt-0" / "instance-0.stderr.log").read_text() == ""


@pytest.mark.parametrize("args, words", [
    (["-np", "0", "x.py"], "--num-instances must be at least 1, got 0"),
    (["-np", "2", "--num-replicas", "3", "x.py"],
     "--num-replicas 3 is not divisible by --num-instances 2"),
    (["-np", "2", "does_not_exist.py"], "program 'does_not_exist.py' does not exist"),
    (["-np", "2", "no-such-command-here"], "was not found on PATH"),
    (["-np", "2", "-x", "1BAD=2", "true"], "'1BAD' is not a valid environment variable name"),
    (["-np", "2", "-x", "SURELY_UNSET_VARIABLE_42", "true"],
     "is not set in poprun-lite's environment"),
    (["-np", "2", "--only-output-from-instance", "5", "true"], "expected 0..1"),
    (["-np", "two", "true"], "'two' is not a valid integer"),
    (["--no-such-option", "true"], "No such option"),
    (["-np", "2"], "Missing argument 'PROGRAM'"),
    (["--config", "no-such-config.toml", "true"], "config file 'no-such-config.toml' not found"),
])
def test_bad_input_is_one_sentence_and_exit_2(args, words):
    result = poprun(*args, timeout=30)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("poprun-lite: error:")
    assert words in lines[0]


def test_unknown_config_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('num-instances = 2\nnum-instancez = 3\n')
    result = poprun("--config", str(config), "true", timeout=30)
    assert result.returncode == 2
    assert "unknown key 'num-instancez'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_print_topology_starts_nothing(tmp_path):
    marker = tmp_path / "started"
    result = poprun("-np", "2", "--num-replicas", "4", "--print-topology",
                    "touch", str(marker), timeout=30)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "2 instance(s), 4 replica(s) (2 per instance)" in result.stdout
    assert re.search(r"^1\s+localhost\s+1\s+2-3\s+127\.0\.0\.1:\d+", result.stdout, re.M)
    assert "POPDIST_REPLICA_INDEX_OFFSET=2" in result.stdout
    assert '"task":{"type":"worker","index":1}' in result.stdout


def test_config_file_env_and_command_line_precedence(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("num-instances: 3\nnum_replicas: 6\ntag-output: false\n")
    exported = tmp_path / "exported.toml"
    args = ["--config", str(config), "--print-topology", "--export-config", str(exported),
            "--overwrite-config", "true"]
    from_file = poprun(*args, timeout=30)
    assert from_file.returncode == 0, from_file.stderr
    assert "3 instance(s), 6 replica(s)" in from_file.stdout
    text = exported.read_text()
    assert "num-instances = 3" in text and "tag-output = false" in text
    env = dict(os.environ, POPRUN_NUM_REPLICAS="9")
    from_env = poprun(*args, env=env, timeout=30)
    assert "3 instance(s), 9 replica(s)" in from_env.stdout
    from_cli = poprun("-np", "2", "--num-replicas", "2", *args, env=env, timeout=30)
    assert "2 instance(s), 2 replica(s)" in from_cli.stdout
    # The exported file reproduces the run it came from.
    again = poprun("--config", str(exported), "--print-topology", "true", timeout=30)
    assert "2 instance(s), 2 replica(s)" in again.stdout


def test_shipped_configs_are_valid():
    configs = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs")
    names = sorted(os.listdir(configs))
    assert names
    for name in names:
        result = poprun("--config", os.path.join(configs, name), "--print-topology", "true",
                        timeout=30)
        assert result.returncode == 0, (name, result.stderr)


def test_python_m_and_console_script_are_the_same_cli():
    script = os.path.join(os.path.dirname(sys.executable), "poprun-lite")
    import subprocess
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "poprun-lite" in result.stdout
    assert poprun("--version").stdout == result.stdout


def test_launcher_never_imports_tensorflow_or_horovod(tmp_path):
    probe = ("import sys, runpy; sys.argv = ['poprun-lite', '-np', '2', 'true'];\n"
             "from popdist_launcher import launch\n"
             "code = launch.run(sys.argv[1:])\n"
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('tensorflow', 'horovod', 'numpy'))\n"
             "print('IMPORTED', bad); sys.exit(code)")
    import subprocess
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "IMPORTED []" in result.stdout


def test_user_value_of_a_horovod_knob_wins(tmp_path):
    # The launcher's measured HOROVOD_FUSION_THRESHOLD under MPI gives way to -x and to the
    # user's own environment.
    result = poprun("-np", "2", "-x", "HOROVOD_FUSION_THRESHOLD=1048576", program("dump_env.py"),
                    str(tmp_path))
    assert result.returncode == 0, result.stderr
    for i in range(2):
        env = json.loads((tmp_path / f"instance-{i}.json").read_text())
        assert env["HOROVOD_CONTROLLER"] == "mpi"
        assert env["HOROVOD_FUSION_THRESHOLD"] == "1048576"
    result = poprun("-np", "2", program("dump_env.py"), str(tmp_path),
                    env={**os.environ, "HOROVOD_FUSION_THRESHOLD": "2097152"})
    assert result.returncode == 0, result.stderr
    for i in range(2):
        env = json.loads((tmp_path / f"instance-{i}.json").read_text())
        assert env["HOROVOD_FUSION_THRESHOLD"] == "2097152"


def test_mpirun_ranks_yield_unless_told_otherwise():
    # Under mpirun a waiting rank would busy-poll and starve TensorFlow's threads; the launcher
    # asks it to yield, and leaves the choice to the user's own MPI arguments.
    result = poprun("-np", "2", "--print-topology", "true")
    assert result.returncode == 0, result.stderr
    assert "backend mpirun" in result.stdout
    assert "--mca mpi_yield_when_idle 1" in result.stdout
    result = poprun("-np", "2", "--mpi-global-args", "--mca mpi_yield_when_idle 0",
                    "--print-topology", "true")
    assert result.returncode == 0, result.stderr
    assert "--mca mpi_yield_when_idle 0" in result.stdout
    assert "mpi_yield_when_idle 1" not in result.stdout


def test_mpirun_start_up_transient_is_retried_once(tmp_path):
    # An mpirun whose PMIx listener fails before any rank starts (seen now and then on loaded
    # machines): the launcher starts it once more, without counting a restart. The stand-in
    # fails that way on its first call, then is the real mpirun.
    real = os.path.join(os.path.dirname(sys.executable), "mpirun")
    fake = tmp_path / "mpirun"
    fake.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {tmp_path}/failed-once ]; then touch {tmp_path}/failed-once\n"
        "  echo \"The PMIx server's listener thread failed to start. We cannot\" >&2; exit 213\n"
        f"fi\nexec {real} \"$@\"\n")
    fake.chmod(0o755)
    os.symlink(os.path.join(os.path.dirname(real), "ompi_info"), tmp_path / "ompi_info")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = poprun("-np", "2", program("dump_env.py"), str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    assert "mpirun failed before starting any instance; starting it once more" in result.stderr
    assert json.loads((tmp_path / "instance-1.json").read_text())["POPRUN_RESTART_COUNT"] == "0"
