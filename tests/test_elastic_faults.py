"""Faults outside Horovod's scenarios, through the real CLI, in both elastic modes: a stopped
(hung) worker is found and treated as a dead one, a stopped driver helper ends the job with a
named cause, a failure that repeats without progress ends the job at --host-failure-limit
whatever the time between failures (one with progress each time goes on), the only host left
failing again ends with a sentence, and hosts A:1, B:1 with --min-np 2 restart A in place in
both modes. "localhost" and "127.0.0.1" are two hosts of this machine (the local backend)."""
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import poprun, program, wait_gone

sys.path.insert(0, str(Path(__file__).parent))
from test_elastic_horovod import (Job, check_membership_log, check_weights,  # noqa: E402
                                  loop_reference, recovery, rounds, start_env)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("horovod_cycle_5ms")]

MEMBER = program("progress_member.py")
TWO = "localhost:1,127.0.0.1:1"


def done(folder: Path, attempt: int):
    return sorted((json.loads(p.read_text()) for p in folder.glob(f"done-a{attempt}-i*")),
                  key=lambda d: (d["host"] or "", d["pid"]))


# ---- hung workers ----------------------------------------------------------------------------

def test_restart_mode_a_stopped_instance_is_found_hung_and_the_job_restarts(tmp_path):
    # Instance 1 stops itself (SIGSTOP) before step 5; instance 0 waits for it as in a
    # collective. --hang-timeout 3: it is killed, blamed like a dead one, the job restarts.
    result = poprun("-np", "2", "--min-np", "2", "--backend", "local", "--hang-timeout", "3",
                    MEMBER, str(tmp_path), "12", "stop:0:1:5", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert re.search(r"instance 1 \(host localhost\) was hung \(stopped\): its process was "
                     r"stopped \(T\) at every probe for \d+ s; pid \d+; bound 3 s "
                     r"\(--hang-timeout\); killed it with SIGKILL", err), err[-3000:]
    assert "restarting in place (failure 1 of --host-failure-limit " \
           "3, counted again from 1 after progress) -> 2 instance(s) on localhost (2) " \
           "(attempt 1" in err
    assert [d["first"] for d in done(tmp_path, 1)] == [6, 6], err[-3000:]  # checkpoint 5
    pids = [int((tmp_path / f"a0-s4-i{i}").read_text()) for i in (0, 1)]
    assert wait_gone(pids) == []


def test_a_fixed_job_with_a_stopped_instance_fails_naming_it(tmp_path):
    # The same check without an elastic job: the hung instance fails the job (exit 1).
    result = poprun("-np", "2", "--backend", "local", "--hang-timeout", "3", MEMBER,
                    str(tmp_path), "12", "stop:0:1:5", timeout=180)
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r"instance 1 \(host localhost\) was hung \(stopped\): its process was "
                     r"stopped \(T\) at every probe for \d+ s; pid \d+; bound 3 s "
                     r"\(--hang-timeout\); killed it with SIGKILL. Stopping the other 1 "
                     r"instance\(s\).", result.stderr), result.stderr[-3000:]
    pids = [int((tmp_path / f"a0-s4-i{i}").read_text()) for i in (0, 1)]
    assert wait_gone(pids) == []


def test_horovod_mode_a_stopped_worker_is_killed_and_its_slot_started_again(tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "--hang-timeout", "15", "elastic_loop.py"])
    job.wait_for_step(12, size=2)
    victim = next(p for p in job.worker_pids() if start_env(p)["HOROVOD_RANK"] == "1")
    moment = time.time()
    os.kill(victim, signal.SIGSTOP)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert re.search(r"instance \d \(rank 1 of 2\) on localhost was hung \(stopped\): its "
                     r"process was stopped \(T\) at every probe for \d+ s; rank 1, pid \d+; "
                     r"bound 15 s \(--hang-timeout\); killed with SIGKILL", text), text[-5000:]
    assert "restarting in place (failure 1 of --host-failure-limit" in text
    assert [size for _, size, _ in rounds(text)] == [2, 2]
    check_membership_log(job, text)
    print(f"\nhung worker (--hang-timeout 15): next step at size 2 after "
          f"{recovery(text, moment, 2):.2f} s")
    assert wait_gone(job.worker_pids(), timeout=10) == []


def helper_of(launcher_pid: int) -> int:
    """The pid of the elastic driver helper the launcher started (its child)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == launcher_pid and \
                b"elastic_driver" in cmdline:
            return int(entry.name)
    raise AssertionError("no elastic driver helper")


def test_horovod_mode_a_stopped_driver_helper_ends_the_job_with_a_named_cause(tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "elastic_loop.py"])
    job.wait_for_step(5, size=2)
    helper = helper_of(job.proc.pid)
    os.kill(helper, signal.SIGSTOP)
    text = job.finish(timeout=120)
    assert job.proc.returncode == 1, text[-5000:]
    assert f"job failed: the elastic driver (helper process, pid {helper}) sent nothing for " \
           f"10 s (its heartbeat comes every 1 s): it is stopped or stuck." in text
    assert "Traceback" not in text
    assert wait_gone(job.worker_pids() + [helper], timeout=10) == []


# ---- failures that repeat --------------------------------------------------------------------

def test_restart_mode_a_slow_failure_that_repeats_without_progress_ends(tmp_path):
    # Every attempt restores the checkpoint (step 2) and fails 1.5 s later at step 3, before
    # reporting it: the job's highest step never grows, so time between failures is no
    # progress and the job ends at --host-failure-limit 2.
    result = poprun("-np", "1", "--min-np", "1", "--backend", "local", "--host-failure-limit",
                    "2", MEMBER, str(tmp_path), "8", "fail:*:0:3", timeout=180,
                    env={**os.environ, "SLOW": "1.5"})
    assert result.returncode == 3, result.stderr[-3000:]
    err = result.stderr
    assert "===== elastic job: 2 attempt(s) =====" in err
    assert re.search(r"the job ends: instance 0 exited with code 3 \(host localhost\), pid \d+, "
                     r"the 2nd failure of localhost in a row without progress "
                     r"\(--host-failure-limit 2\)", err), err[-3000:]
    assert not done(tmp_path, 1)


def test_restart_mode_a_failure_after_progress_each_time_goes_on(tmp_path):
    # Each attempt trains 2 steps past the checkpoint, then fails: 4 failures of the only
    # host, each after progress, with --host-failure-limit 2: the job finishes.
    result = poprun("-np", "1", "--min-np", "1", "--backend", "local", "--host-failure-limit",
                    "2", MEMBER, str(tmp_path), "9", "fail:*:0:+3", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("restarting in place (failure 1 of --host-failure-limit") == 4
    assert "===== elastic job: 5 attempt(s) =====" in result.stderr
    assert done(tmp_path, 4)[0]["first"] == 9


def test_horovod_mode_a_failure_that_repeats_before_a_commit_ends(tmp_path):
    # The last rank exits with 3 as it begins step 8, after 1 s, every time: the survivors go
    # back to the commit at step 5, and no commit comes again. The driver's failure policy
    # ends the job at --host-failure-limit 2.
    job = Job(tmp_path, ["-np", "2", "--min-np", "2", "--backend", "local", "--elastic-mode",
                         "horovod", "--host-failure-limit", "2", "-x", "ELASTIC_FAIL_STEP",
                         "-x", "ELASTIC_FAIL_SLOW", "elastic_loop.py"],
              env={"ELASTIC_FAIL_STEP": "8", "ELASTIC_FAIL_SLOW": "1"})
    text = job.finish()
    assert job.proc.returncode == 1, text[-5000:]
    assert re.search(r"instance \d on localhost exited with code 3; restarting in place "
                     r"\(failure 1 of --host-failure-limit 2, counted again from 1 after "
                     r"progress\)", text)
    assert re.search(r"job failed: instance \d on localhost exited with code 3, the 2nd "
                     r"failure of localhost in a row without progress \(--host-failure-limit "
                     r"2\), and the other hosts cannot carry --min-np 2", text), text[-5000:]
    assert wait_gone(job.worker_pids(), timeout=10) == []


def test_restart_mode_the_only_host_left_failing_again_ends_with_a_sentence(tmp_path):
    # 127.0.0.1's instance fails: blacklisted (localhost carries --min-np 1); then localhost's
    # instance fails at the start of every attempt: in place once, then the job ends.
    result = poprun("-np", "2", "--min-np", "1", "-H", TWO, "--host-failure-limit", "2",
                    MEMBER, str(tmp_path), "6", "fail:0:1:2", "fail:1:0:+1", "fail:2:0:+1",
                    timeout=180)
    assert result.returncode == 3, result.stderr[-3000:]
    err = result.stderr
    assert "127.0.0.1 removed (instance 1 exited with code 3 (host 127.0.0.1)" in err
    assert "restarting in place (failure 1 of --host-failure-limit " \
           "2, counted again from 1 after progress) -> 1 instance(s) on localhost (1) " \
           "(attempt 2" in err
    assert re.search(r"the job ends: instance 0 exited with code 3 \(host localhost\), pid \d+, "
                     r"the 2nd failure of localhost in a row without progress "
                     r"\(--host-failure-limit 2\), and the other hosts cannot carry --min-np 1 "
                     r"\(0 usable slot\(s\) without localhost\)\.", err), err[-3000:]
    assert "waiting up to" not in err


# ---- hosts A:1, B:1 and --min-np 2: the same decision in both modes --------------------------

def test_restart_mode_two_hosts_min_np_2_restarts_the_failed_host_in_place(tmp_path):
    result = poprun("-np", "2", "--min-np", "2", "-H", TWO, MEMBER, str(tmp_path), "6",
                    "fail:0:1:3", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert "instance 1 exited with code 3 (host 127.0.0.1)" in err
    assert "restarting in place (failure 1 of --host-failure-limit " \
           "3, counted again from 1 after progress) -> 2 instance(s) on localhost (1), " \
           "127.0.0.1 (1) (attempt 1" in err
    assert "blacklisted" not in err and "waiting up to" not in err
    assert [d["host"] for d in done(tmp_path, 1)] == ["127.0.0.1", "localhost"]


def test_horovod_mode_two_hosts_min_np_2_restarts_the_failed_host_in_place(tmp_path):
    job = Job(tmp_path, ["-np", "2", "--min-np", "2", "-H", TWO, "--elastic-mode", "horovod",
                         "elastic_loop.py"])
    job.wait_for_step(12, size=2)
    victim = next(p for p in job.worker_pids() if start_env(p)["HOROVOD_HOSTNAME"] == "127.0.0.1")
    os.kill(victim, signal.SIGKILL)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert re.search(r"instance \d on 127\.0\.0\.1 was killed by SIGKILL; restarting in place "
                     r"\(failure 1 of --host-failure-limit 3, counted again from 1 after "
                     r"progress\)", text)
    assert "blacklisted" not in text
    assert [size for _, size, _ in rounds(text)] == [2, 2]
    assert wait_gone(job.worker_pids(), timeout=10) == []
