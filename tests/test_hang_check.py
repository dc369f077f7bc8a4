"""The hang check through the real CLI (real Horovod workers, real TensorFlow): a worker that
spins in Python, waits on a lock it holds, blocks reading a pipe, or calls another collective
than its peers is found, named with its stack and cut, in a fixed-world job (the job fails
naming it), a restart-mode job (the attempt ends, the job re-forms) and a Horovod-mode elastic
job (killed, handled as a death: the survivor restores its commit and the job finishes with the
reference's weights); and legitimate long phases (a marked one, TensorFlow busy on one rank,
every rank in its own code) are not cut. The pure decisions are in test_hang_decision.py."""
import re
import sys
from pathlib import Path

import pytest

from conftest import poprun, program, wait_gone

sys.path.insert(0, str(Path(__file__).parent))
from test_elastic_horovod import Job, check_weights, loop_reference, rounds  # noqa: E402

pytestmark = pytest.mark.slow

MEMBER = program("hang_member.py")
HUNG = re.compile(r"instance (\d) \(host localhost\) was hung: (.*?); killed it with SIGKILL")


def run(mode, fault, *options, steps="16", timeout=240, backend="local"):
    return poprun("-np", "2", "--backend", backend, *options, sys.executable, MEMBER, mode,
                  steps, fault, timeout=timeout)


@pytest.mark.parametrize("mode, fault, peers", [
    ("function", "busy:1:4", "instance 0 in a TensorFlow step"),
    ("eager", "lock:1:4", "instance 0 in collective allreduce"),
    ("function", "read:0:4", "instance 1 in a TensorFlow step"),
])
def test_a_fixed_job_names_and_cuts_the_hung_worker(mode, fault, peers):
    result = run(mode, fault, "--hang-timeout", "8")
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    hung = int(fault.split(":")[1])
    found = HUNG.search(err)
    assert found and int(found[1]) == hung, err[-4000:]
    assert found[2].startswith("it ran its own code, outside any collective, for ")
    assert f"while its peers waited ({peers}" in found[2]
    assert f"rank {hung}, pid " in found[2]
    assert "nothing in the job moved for 8 s: --hang-timeout)" in found[2]
    # its stack, printed before it is cut, shows where it hangs
    assert f"hang check: the Python stacks of instance {hung} (host localhost, pid " in err
    assert re.search(r'hang_member\.py", line \d+ in hang', err), err[-4000:]
    assert "===== job failed: root cause =====" in err
    assert "done rank" not in result.stdout


def test_the_mpi_backend_decides_the_same():
    # mpirun starts the wrappers; the same whereabouts and decision find the same worker.
    result = run("eager", "read:1:4", "--hang-timeout", "8", backend="mpi")
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = HUNG.search(err)
    assert found and found[1] == "1", err[-4000:]
    assert "while its peers waited (instance 0 in collective allreduce; rank 1, pid " in found[2]


def test_with_the_default_options_a_spinning_worker_is_cut():
    result = run("function", "busy:1:20", steps="400", timeout=300)
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = HUNG.search(err)
    assert found and found[1] == "1", err[-4000:]
    assert re.search(r"nothing in the job moved for \d+ s: the default hang bound\)", found[2])


def test_two_ranks_in_different_collectives_are_both_named():
    result = run("eager", "mismatch:1:4", "--hang-timeout", "8")
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = HUNG.search(err)
    assert found, err[-4000:]
    assert "the instances waited in different collectives, none in the majority" in found[2]
    assert "instance 0 in collective allreduce; instance 1 in collective broadcast_object > " \
           "broadcast" in found[2]


@pytest.mark.parametrize("fault", ["long:0:4:20", "tfbusy:0:4:20", "allown:0:4:20"])
def test_long_phases_are_not_cut(fault):
    # Rank 0 marks a 20 s phase, or runs TensorFlow for 20 s, while rank 1 waits in its next
    # allreduce; or every rank sleeps 20 s in its own code: bound 6 s, nothing is cut.
    result = run("eager", fault, "--hang-timeout", "6", steps="8")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "was hung" not in result.stderr
    weights = re.findall(r"done rank \d weight (\S+)", result.stdout)
    assert len(weights) == 2 and weights[0] == weights[1], result.stdout[-2000:]


def test_restart_mode_ends_the_attempt_and_the_job_re_forms():
    # Attempt 0: rank 1 spins before step 4 and is cut; attempt 1 (no fault) finishes.
    result = poprun("-np", "2", "--min-np", "2", "--backend", "local", "--hang-timeout", "8",
                    sys.executable, MEMBER, "function", "6", "busy:1:4", timeout=300)
    err = result.stderr
    assert result.returncode == 0, err[-4000:]
    found = HUNG.search(err)
    assert found and found[1] == "1", err[-4000:]
    assert "(attempt 1" in err, err[-4000:]
    assert len(re.findall(r"done rank \d weight", result.stdout)) == 2


@pytest.mark.parametrize("kind", ["busy", "lock", "read"])
def test_horovod_mode_the_hung_worker_is_killed_and_the_job_goes_on(tmp_path, kind):
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "--hang-timeout", "8", "-x", "ELASTIC_HANG",
                         "elastic_loop.py"], env={"ELASTIC_HANG": f"{kind}:15"})
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    assert re.search(r"instance \d \(rank 1 of 2\) on localhost was hung: it ran its own code, "
                     r"outside any collective, for \d+ s while its peers waited \(instance \d "
                     r"in a TensorFlow step", text), text[-5000:]
    assert "hang check: the Python stacks of instance" in text
    assert [size for _, size, _ in rounds(text)][:2] == [2, 2]
    assert wait_gone(job.worker_pids(), timeout=10) == []


def test_horovod_mode_two_workers_in_different_collectives_end_the_round_both_named(tmp_path):
    # Rank 1 calls hvd.broadcast_object while rank 0 is in its training step: no majority, so
    # both are cut and named; with no survivor the job ends (it does not hang).
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "--hang-timeout", "8", "-x", "ELASTIC_HANG",
                         "elastic_loop.py"], env={"ELASTIC_HANG": "mismatch:15"})
    text = job.finish()
    assert job.proc.returncode != 0, text[-5000:]
    named = re.findall(r"instance \d \(rank (\d) of 2\) on localhost was hung: the instances "
                       r"waited in different collectives, none in the majority, for \d+ s "
                       r"\(instance \d in a TensorFlow step, not computing \(a graph "
                       r"collective\); instance \d in collective broadcast_object > broadcast",
                       text)
    assert sorted(set(named)) == ["0", "1"], text[-5000:]
    assert wait_gone(job.worker_pids(), timeout=10) == []
