"""The launcher supervises every instance itself: the same exit attribution, signals, grace
periods, output, stdin and hang diagnosis through the real CLI on the local backend (the
launcher forks each wrapper) and under mpirun (the default for a one-host job here)."""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import LAUNCHER, alive, poprun, poprun_background, program, read_pids, \
    wait_for_files, wait_gone

BACKENDS = ["local", "mpi"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return ["--backend", request.param]


def test_the_failing_instance_is_named_even_when_all_end_together(backend, pid_dir):
    # Instance 2 fails while the others end cleanly at about the same moment, after closing
    # their output: the report names instance 2, its code and its own stderr, every time.
    for _ in range(5):
        result = poprun("-np", "4", *backend, program("behave.py"), str(pid_dir), "exit:9@2",
                        "closeout", "exit:0")
        assert result.returncode == 9, result.stderr
        cause = result.stderr.split("root cause =====", 1)[1]
        assert "instance 2 exited with code 9 (host localhost)" in cause
        assert "last 1 line(s) of instance 2's stderr:\n    instance 2 gives up with code 9" \
            in cause


def test_report_quotes_stdout_when_stderr_is_empty(backend, pid_dir):
    # (pytest reports its failures on stdout)
    result = poprun("-np", "2", *backend, "python", "-c",
                    "import os, sys, time\n"
                    "if os.environ['POPDIST_INSTANCE_INDEX'] == '1':\n"
                    "    print('\\n'.join(f'instance 1 stdout line {n}' for n in range(30)))\n"
                    "    sys.exit(3)\n"
                    "time.sleep(30)\n")
    assert result.returncode == 3, result.stderr
    cause = result.stderr.split("root cause =====", 1)[1]
    assert "instance 1 wrote nothing to stderr; last 20 line(s) of its stdout:" in cause
    assert "    instance 1 stdout line 29" in cause and "stdout line 9\n" not in cause


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_program_receives_the_launchers_signal_and_the_full_grace_period(backend, pid_dir, sig):
    job = poprun_background("-np", "2", *backend, "--grace-period", "20", program("behave.py"),
                            str(pid_dir), "onstop:2", "sleep:120")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(2)])
    job.send_signal(sig)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 128 + sig, err
    for i in range(2):
        assert (pid_dir / f"signal-{i}").read_text() == sig.name  # not SIGCONT, not SIGTERM
        assert (pid_dir / f"saved-{i}").read_text() == "saved"  # 2 s of saving, not cut off


def test_after_a_failure_survivors_get_sigterm_and_the_grace_period(backend, pid_dir):
    result = poprun("-np", "3", *backend, "--grace-period", "20", program("behave.py"),
                    str(pid_dir), "onstop:2", "waitfor:ready-0@1", "waitfor:ready-2@1",
                    "exit:4@1", "sleep:120")
    assert result.returncode == 4, result.stderr
    for i in (0, 2):
        assert (pid_dir / f"signal-{i}").read_text() == "SIGTERM"
        assert (pid_dir / f"saved-{i}").read_text() == "saved"
    assert "instance 1 exited with code 4" in result.stderr


def test_a_program_ignoring_sigterm_is_killed_after_the_grace_period(backend, pid_dir):
    job = poprun_background("-np", "2", *backend, "--grace-period", "1", "python", "-c",
                            "import signal, time, os, sys; signal.signal(signal.SIGTERM, "
                            "signal.SIG_IGN); open(os.path.join(sys.argv[1], 'pid-' + "
                            "os.environ['POPDIST_INSTANCE_INDEX']), 'w').write(str(os.getpid())); "
                            "time.sleep(120)", str(pid_dir))
    wait_for_files([pid_dir / f"pid-{i}" for i in range(2)])
    pids = read_pids(pid_dir, "pid")
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 128 + signal.SIGTERM, err
    assert wait_gone(pids) == []


def test_progress_bar_stays_with_its_instance_and_its_log(backend, pid_dir, tmp_path):
    logs = tmp_path / "logs"
    result = subprocess.run([*LAUNCHER, "-np", "2", *backend, "--output-dir", str(logs),
                             program("behave.py"), str(pid_dir), "progress:50"],
                            capture_output=True, timeout=120)  # bytes: \r stays \r
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split(b"\n")[:-1]
    assert len(lines) == 2  # one line per instance, not one per refresh
    for i in range(2):
        expected = "".join(f"\rinstance {i} progress {n + 1}/50" for n in range(50)).encode()
        assert f"[{i}]<stdout>:".encode() + expected in lines
        log = (logs / "attempt-0" / f"instance-{i}.stdout.log").read_bytes()
        assert log == expected + b"\n"  # the program's bytes, no tag, no escape codes
    assert result.stderr == b""  # nothing of it went to stderr (as [mpirun]: lines did)


def on_terminal(args, when=None, then=None, timeout=120):
    """Run poprun-lite with stdout and stderr on a pseudo-terminal: its exit code and what the
    terminal got (newlines as \\n); once the terminal shows WHEN, call THEN()."""
    leader, follower = pty.openpty()
    job = subprocess.Popen([*LAUNCHER, *args], stdin=subprocess.DEVNULL, stdout=follower,
                           stderr=follower)
    os.close(follower)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([leader], [], [], deadline - time.monotonic())[0]:
                break
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the launcher closed the terminal
                break
            if not data:
                break
            shown += data
            if when is not None and when in shown.replace(b"\r\n", b"\n"):
                then()
                when = None
    finally:
        os.close(leader)
        if job.poll() is None:
            job.kill()
    return job.wait(timeout=30), shown.replace(b"\r\n", b"\n")


def test_on_a_terminal_lines_printed_in_pieces_are_never_split(backend, pid_dir):
    # print(a, b) with unbuffered output writes a, b and the newline apart; on a terminal the
    # other instance's lines must not land between the pieces.
    code, shown = on_terminal(["-np", "2", *backend, program("behave.py"), str(pid_dir),
                               "words:300"])
    assert code == 0, shown[-2000:]
    lines = [line for line in shown.split(b"\n") if line]
    broken = [line for line in lines
              if not re.fullmatch(rb"\[(\d)\]<stdout>:instance \1 line \d+ end", line)]
    assert broken == []
    assert len(lines) == 600


def test_on_a_terminal_a_prompt_without_newline_still_shows(backend, pid_dir):
    code, shown = on_terminal(["-np", "2", *backend, program("behave.py"), str(pid_dir),
                               "prompt@0", "waitfor:go"],
                              when=b"[0]<stdout>:Name? ",
                              then=lambda: (pid_dir / "go").write_text("go"))
    assert code == 0, shown[-2000:]
    assert (pid_dir / "go").exists(), shown  # the prompt showed while instance 0 waited
    assert shown.count(b"Name? ") == 1


def test_big_lines_without_newline_are_never_merged(backend, pid_dir, tmp_path):
    logs = tmp_path / "logs"
    result = poprun("-np", "2", *backend, "--output-dir", str(logs), program("behave.py"),
                    str(pid_dir), "bigline:10", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split("\n")[:-1]
    assert sorted(len(line) for line in lines) == [len("[0]<stdout>:") + (10 << 20)] * 2
    for i in range(2):
        line = next(line for line in lines if line.startswith(f"[{i}]<stdout>:"))
        assert line.count(str(i)) == (10 << 20) + 1  # its own digit only (and the tag's)
        assert (logs / "attempt-0" / f"instance-{i}.stdout.log").read_bytes() == \
            str(i).encode() * (10 << 20)


def test_binary_output_passes_byte_for_byte(backend, pid_dir, tmp_path):
    logs = tmp_path / "logs"
    result = subprocess.run([sys.executable, "-m", "popdist_launcher", "-np", "2", *backend,
                             "--no-tag-output", "--output-dir", str(logs), program("behave.py"),
                             str(pid_dir), "binary"], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = bytes(range(256)) * 4
    for i in range(2):
        assert (logs / "attempt-0" / f"instance-{i}.stdout.log").read_bytes() == data
    assert result.stdout.count(data[:10]) == 8  # both instances, 4 copies each, unchanged


def test_leftovers_in_the_group_and_setsid_daemons_do_not_outlive_the_job(backend, pid_dir):
    start = time.monotonic()
    result = poprun("-np", "2", *backend, program("behave.py"), str(pid_dir), "child",
                    "daemon", "exit:0", timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 50  # the daemons held stdout: the job did not wait on them
    leftovers = read_pids(pid_dir, "child") + read_pids(pid_dir, "daemon")
    assert len(leftovers) == 4
    assert wait_gone(leftovers) == []


def test_stdin_goes_to_instance_0_only(backend, pid_dir):
    result = poprun("-np", "2", *backend, program("behave.py"), str(pid_dir), "stdin",
                    input="first line\nsecond line\n")
    assert result.returncode == 0, result.stderr
    assert (pid_dir / "stdin-0").read_text() == "first line\nsecond line\n"
    assert (pid_dir / "stdin-1").read_text() == ""


def test_an_argument_of_131000_characters_reaches_every_instance(backend, pid_dir):
    result = poprun("-np", "2", *backend, program("behave.py"), str(pid_dir), "argsize",
                    "x" * 131000)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [(pid_dir / f"argsize-{i}").read_text() for i in range(2)] == ["131000"] * 2


def test_timeout_puts_every_instances_stacks_in_the_report_and_the_logs(backend, pid_dir,
                                                                          tmp_path):
    logs = tmp_path / "logs"
    result = poprun("-np", "2", *backend, "--timeout", "4", "--grace-period", "2",
                    "--output-dir", str(logs), program("behave.py"), str(pid_dir), "hang")
    assert result.returncode == 124, result.stderr
    report = result.stderr.split("root cause =====", 1)[1]
    assert "the job timeout (--timeout 4 s) expired" in report
    stacks = report.split("Python stacks of every instance (all threads) =====", 1)[1]
    for i in range(2):
        own = stacks.split(f"instance {i} (host localhost):", 1)[1].split("poprun-lite:")[0]
        assert "in hang_here" in own and "in side_thread" in own
        saved = (logs / "attempt-0" / f"instance-{i}.stacks.log").read_text()
        assert "in hang_here" in saved and "in side_thread" in saved


def test_sigquit_prints_every_stack_and_the_job_goes_on(backend, pid_dir, tmp_path):
    # The instances go on until the stacks are saved, then end by themselves.
    logs = tmp_path / "logs"
    job = poprun_background("-np", "2", *backend, "--output-dir", str(logs),
                            program("behave.py"), str(pid_dir), "usr1", "waitfor:go", "exit:0")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(2)])
    job.send_signal(signal.SIGQUIT)
    wait_for_files([logs / "attempt-0" / f"instance-{i}.stacks.log" for i in range(2)])
    (pid_dir / "go").write_text("go")
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    assert err.count("in <module>") == 2 and "Python stacks of every instance" in err


def test_a_stall_report_collects_every_instances_stacks(backend, pid_dir):
    result = poprun("-np", "2", *backend, "--grace-period", "2", program("behave.py"),
                    str(pid_dir), "hang@0", "waitfor:ready-0", "stall@1", "sleep:1", "exit:5@1")
    assert result.returncode == 124, result.stderr  # a stalled job ends as --timeout does
    assert "instance 1 reports a stalled collective (collective stall on instance 1" \
        in result.stderr
    assert "job failed: root cause =====\npoprun-lite: a collective stalled: instance 1 (host " \
        "localhost) waited too long" in result.stderr
    stacks = result.stderr.split("Python stacks of every instance (all threads) =====", 1)[1]
    assert "in hang_here" in stacks.split("instance 0 (host localhost):", 1)[1]


def test_output_dir_keeps_every_attempt(backend, pid_dir, tmp_path):
    logs = tmp_path / "logs"
    result = poprun("-np", "2", *backend, "--max-restarts", "1", "--output-dir", str(logs),
                    program("behave.py"), str(pid_dir), "exit:6@1")
    assert result.returncode == 6
    for attempt in (0, 1):
        assert "instance 1 gives up with code 6" in \
            (logs / f"attempt-{attempt}" / "instance-1.stderr.log").read_text()


def test_output_dir_never_follows_a_planted_symlink(pid_dir, tmp_path):
    logs, victim = tmp_path / "logs", tmp_path / "victim.txt"
    victim.write_text("precious")
    (logs / "attempt-0").mkdir(parents=True)
    os.symlink(victim, logs / "attempt-0" / "instance-0.stdout.log")
    result = poprun("-np", "1", "--output-dir", str(logs), program("behave.py"), str(pid_dir),
                    "stdout:2")
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "precious"
    log = logs / "attempt-0" / "instance-0.stdout.log"
    assert not log.is_symlink() and "stdout line 1" in log.read_text()
    (logs / "attempt-1").symlink_to(tmp_path)  # a planted folder link is replaced, not followed
    result = poprun("-np", "2", "--max-restarts", "1", "--output-dir", str(logs),
                    program("behave.py"), str(pid_dir), "exit:6@1")
    assert result.returncode == 6, result.stderr
    assert not (logs / "attempt-1").is_symlink()
    assert (logs / "attempt-1" / "instance-1.stderr.log").read_text() != ""
    assert not (tmp_path / "instance-1.stderr.log").exists()


@pytest.mark.parametrize("where", ["below-a-file", "in-proc"])
def test_unusable_output_dir_is_one_sentence(tmp_path, where):
    if where == "below-a-file":
        (tmp_path / "file").write_text("x")
        folder = tmp_path / "file" / "logs"
    else:
        folder = "/proc/1/poprun-logs"
    result = poprun("-np", "2", "--output-dir", str(folder), "true", timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("poprun-lite: error: --output-dir") and "cannot be used" in lines[0]


def test_engine_failing_before_any_instance_started_is_named(tmp_path):
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\necho 'mpirun: cannot reach the daemons on node9' >&2\nexit 3\n")
    fake.chmod(0o755)
    os.symlink(os.path.join(os.path.dirname(sys.executable), "ompi_info"), tmp_path / "ompi_info")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = poprun("-np", "2", "--backend", "mpi", "true", env=env, timeout=60)
    assert result.returncode == 3
    report = result.stderr.split("root cause =====", 1)[1]
    assert "mpirun exited with code 3 before instance(s) 0, 1 started" in report
    assert "cannot reach the daemons on node9" in report


def test_launcher_sigkill_ends_setsid_daemons_too(backend, pid_dir):
    job = poprun_background("-np", "2", *backend, program("behave.py"), str(pid_dir), "daemon",
                            "child", "sleep:120")
    wait_for_files([pid_dir / f"child-{i}" for i in range(2)])
    pids = read_pids(pid_dir, "pid") + read_pids(pid_dir, "child") + read_pids(pid_dir, "daemon")
    assert len(pids) == 6 and all(alive(p) for p in pids)
    job.kill()
    job.wait(timeout=10)
    assert wait_gone(pids, timeout=20) == []


def test_wrapper_refuses_a_connection_without_the_job_secret(pid_dir):
    # A local process that finds the launcher's socket cannot pose as an instance.
    job = poprun_background("-np", "2", "--backend", "mpi", program("behave.py"), str(pid_dir),
                            "usr1", "waitfor:intruder-done")
    wait_for_files([pid_dir / f"ready-{i}" for i in range(2)])
    sockets = [os.path.join(root, name) for root, _, names in os.walk(os.environ.get(
        "TMPDIR", "/tmp")) if f"poprun-lite-{job.pid}-" in root for name in names]
    assert len(sockets) == 1
    intruder = subprocess.run(
        [sys.executable, "-m", "popdist_launcher.launcher.spawned.instance", "--connect",
         f"unix:{sockets[0]}", "--index", "1"], capture_output=True, text=True, timeout=30,
        env={**os.environ, "POPRUN_JOB_SECRET": "0" * 32})
    assert intruder.returncode != 0
    (pid_dir / "intruder-done").touch()  # the job outlives the intruder, however slow it starts
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    assert "refused a connection that did not prove it belongs to this job" in err
    assert re.search(r"^\[1\]", out, re.M) is None  # nothing of the intruder's ran


@pytest.mark.slow
def test_the_collectives_stall_watchdog_brings_every_stack_into_the_report():
    # A real stall: instance 1 never joins the allreduce instance 0 waits in.
    result = poprun("-np", "2", "--grace-period", "3", program("stall.py"), timeout=300)
    assert result.returncode == 124, result.stderr[-3000:]
    assert "instance 0 reports a stalled collective (collective stall on instance 0 of 2" \
        in result.stderr
    # the root cause is the stall, and names the instance that never joined
    assert "a collective stalled: instance 0 (host localhost) waited too long (collective " \
        "stall on instance 0 of 2" in result.stderr
    assert "; never joined: instance 1 (its own code, outside any collective)." in result.stderr
    stacks = result.stderr.split("Python stacks of every instance (all threads) =====", 1)[1]
    assert "in allreduce" in stacks.split("instance 0 (host localhost):", 1)[1]
    assert "in busy_elsewhere" in stacks.split("instance 1 (host localhost):", 1)[1]
