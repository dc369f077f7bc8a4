"""The hang check through the real CLI (real Horovod workers, real TensorFlow): a worker that
spins in Python (busy), waits on a lock it holds or blocks reading a pipe (blocked), or calls
another collective than its peers (absent) is found, named with its kind, evidence and stack
and cut, in a fixed-world job (the job fails
naming it), a restart-mode job (the attempt ends, the job re-forms) and a Horovod-mode elastic
job (killed, handled as a death: the survivor restores its commit and the job finishes with the
reference's weights); and legitimate long phases (a marked one, TensorFlow busy on one rank,
every rank in its own code, one rank busy past the old 30 s bound) are not cut. The hangs
inside TensorFlow and the other controls are in test_hang_kinds.py; the pure decisions in
test_hang_decision.py and test_hang_check_units.py."""
import re
import sys
from pathlib import Path

import pytest

from conftest import poprun, program, wait_gone
from side_by_side import poprun_together

sys.path.insert(0, str(Path(__file__).parent))
from test_elastic_horovod import Job, check_weights, loop_reference, rounds  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("horovod_cycle_5ms")]

MEMBER = program("hang_member.py")
HUNG = re.compile(r"instance (\d) \(host localhost\) was hung \((\w+)\): (.*?); killed it with "
                  r"SIGKILL")
BUSY = ("--hang-busy-timeout", "12")  # a spinning worker is cut after 12 s, not 600


def run(mode, fault, *options, steps="16", timeout=240, backend="local"):
    return poprun("-np", "2", "--backend", backend, *options, sys.executable, MEMBER, mode,
                  steps, fault, timeout=timeout)


FIXED_HANGS = [
    ("function", "busy:1:4", "busy", "it ran its own code (CPU, I/O or a moving stack) for ",
     "instance 0 in a TensorFlow step"),
    ("eager", "lock:1:4", "blocked", "no CPU and no I/O for ",
     "instance 0 in collective allreduce"),
    ("function", "read:0:4", "blocked", "no CPU and no I/O for ",
     "instance 1 in a TensorFlow step"),
]


@pytest.fixture(scope="module")
def fixed_hang_results():
    """The jobs of the test below, run side by side: each waits out its bound (8 or 12 s)."""
    return poprun_together({
        fault: ["-np", "2", "--backend", "local", "--hang-timeout", "8", *BUSY, sys.executable,
                MEMBER, mode, "16", fault] for mode, fault, *_ in FIXED_HANGS})


@pytest.mark.parametrize("mode, fault, kind, evidence, peers", FIXED_HANGS)
def test_a_fixed_job_names_and_cuts_the_hung_worker(fixed_hang_results, mode, fault, kind,
                                                    evidence, peers):
    result = fixed_hang_results[fault]
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    hung = int(fault.split(":")[1])
    found = HUNG.search(err)
    assert found and int(found[1]) == hung and found[2] == kind, err[-4000:]
    assert found[3].startswith(evidence), found[3]
    assert re.search(r"main thread in hang at hang_member\.py:\d+", found[3]), found[3]
    assert f"; its peers waited ({peers}" in found[3]
    assert f"rank {hung}, pid " in found[3]
    bound = "bound 12 s (--hang-busy-timeout)" if kind == "busy" else "bound 8 s (--hang-timeout)"
    assert found[3].endswith(bound), found[3]
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
    assert found and found[1] == "1" and found[2] == "blocked", err[-4000:]
    assert "; its peers waited (instance 0 in collective allreduce); rank 1, pid " in found[3]


def test_with_the_default_options_a_rank_busy_past_the_old_bound_is_not_cut():
    # Rank 0 runs its own code (NumPy) for 40 s while rank 1 waits in its next allreduce: more
    # than the 30 s the check once allowed; with the default bounds (busy: 600 s) the job
    # finishes as under horovodrun.
    result = poprun("-np", "2", "--backend", "local", sys.executable,
                    program("hang_cases.py"), "report", "0", "40", timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "was hung" not in result.stderr
    weights = re.findall(r"done rank \d weight (\S+)", result.stdout)
    assert len(weights) == 2 and weights[0] == weights[1], result.stdout[-2000:]


def test_two_ranks_in_different_collectives_are_both_named():
    result = run("eager", "mismatch:1:4", "--hang-timeout", "8")
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    for index, where in ((0, "collective allreduce"),
                         (1, "collective broadcast_object > broadcast")):
        line = re.search(rf"hang check: instance {index} \(host localhost\) was hung \(absent\): "
                         rf"it waited in {where} for \d+ s while the others waited in different "
                         rf"collectives, none in the majority; its peers waited \(instance 0 in "
                         rf"collective allreduce; instance 1 in collective broadcast_object > "
                         rf"broadcast\); rank {index}, pid \d+; bound 8 s \(--hang-timeout\)", err)
        assert line, err[-4000:]


LONG_PHASES = ["long:0:4:14", "tfbusy:0:4:14", "allown:0:4:14"]


@pytest.fixture(scope="module")
def long_phase_results():
    """The jobs of the test below, run side by side: each waits 14 s, so together they wait
    once."""
    return poprun_together({
        fault: ["-np", "2", "--backend", "local", "--hang-timeout", "6", sys.executable, MEMBER,
                "eager", "8", fault] for fault in LONG_PHASES})


@pytest.mark.parametrize("fault", LONG_PHASES)
def test_long_phases_are_not_cut(long_phase_results, fault):
    # Rank 0 marks a 14 s phase, or runs TensorFlow for 14 s, while rank 1 waits in its next
    # allreduce; or every rank sleeps 14 s in its own code: past the bound of 6 s by more than
    # the bound itself, and nothing is cut.
    result = long_phase_results[fault]
    assert result.returncode == 0, result.stderr[-4000:]
    assert "was hung" not in result.stderr
    weights = re.findall(r"done rank \d weight (\S+)", result.stdout)
    assert len(weights) == 2 and weights[0] == weights[1], result.stdout[-2000:]


def test_restart_mode_ends_the_attempt_and_the_job_re_forms():
    # Attempt 0: rank 1 spins before step 4 and is cut; attempt 1 (no fault) finishes.
    result = poprun("-np", "2", "--min-np", "2", "--backend", "local", "--hang-timeout", "8",
                    *BUSY, sys.executable, MEMBER, "function", "6", "busy:1:4", timeout=300)
    err = result.stderr
    assert result.returncode == 0, err[-4000:]
    found = HUNG.search(err)
    assert found and found[1] == "1", err[-4000:]
    assert "(attempt 1" in err, err[-4000:]
    assert len(re.findall(r"done rank \d weight", result.stdout)) == 2


HOROVOD_HANGS = ["busy", "lock", "read"]


@pytest.fixture(scope="module")
def horovod_hang_jobs(tmp_path_factory):
    """The jobs of the test below, started together (each waits out its bound, then the
    survivor's reset); each test finishes its own."""
    jobs = {kind: Job(tmp_path_factory.mktemp(f"horovod-{kind}"),
                      ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                       "horovod", "--hang-timeout", "8", *BUSY, "-x", "ELASTIC_HANG",
                       "elastic_loop.py"], env={"ELASTIC_HANG": f"{kind}:15"})
            for kind in HOROVOD_HANGS}
    yield jobs
    for job in jobs.values():
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


@pytest.mark.parametrize("kind", HOROVOD_HANGS)
def test_horovod_mode_the_hung_worker_is_killed_and_the_job_goes_on(horovod_hang_jobs, kind):
    job = horovod_hang_jobs[kind]
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_weights(job, loop_reference)
    kinds = {"busy": "busy", "lock": "blocked", "read": "blocked"}
    assert re.search(rf"instance \d \(rank 1 of 2\) on localhost was hung \({kinds[kind]}\): .*"
                     rf"; its peers waited \(instance \d in a TensorFlow step", text), text[-5000:]
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
    named = re.findall(r"instance \d \(rank (\d) of 2\) on localhost was hung \(absent\): it "
                       r"waited in [^;]* for \d+ s while the others waited in different "
                       r"collectives, none in the majority; its peers waited \(instance \d in a "
                       r"TensorFlow step, not computing \(a graph collective\); instance \d in "
                       r"collective broadcast_object > broadcast", text)
    assert sorted(set(named)) == ["0", "1"], text[-5000:]
    assert wait_gone(job.worker_pids(), timeout=10) == []
