"""The hang check's kinds through the real CLI, on plain Horovod programs (TF 2, two ranks,
tests/programs/hang_cases.py): hangs inside TensorFlow end (a ``from_generator`` input that
blocks under a ``tf.function`` step and under Keras ``fit``: blocked; a differently named graph
allreduce: both absent; a spinning ``tf.py_function``: busy), a rank left alone at interpreter
exit is ended, and what horovodrun would finish is never cut: one rank busy in NumPy, downloading
before the first collective, sleeping, writing files or in an import that waits for longer than
the short bounds, and a Horovod elastic worker working 20 s after a commit while its peer waits
(one round)."""
import re
import sys
from pathlib import Path

import pytest

from conftest import poprun, program
from side_by_side import poprun_together

sys.path.insert(0, str(Path(__file__).parent))
from test_elastic_horovod import Job, check_weights, loop_reference, rounds  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("horovod_cycle_5ms")]

CASES = program("hang_cases.py")
HUNG = re.compile(r"instance (\d) \(host localhost\) was hung \((\w+)\): (.*?); killed it with "
                  r"SIGKILL")
STEPS = 8  # hang_cases.py's


def reference_weight(ranks=2, steps=STEPS, lr=0.01):
    """hang_cases.py's weight after ``steps`` plain steps: w -= lr * mean_r 2 (w x_r - 1) x_r,
    x_r = r + 1 (Horovod's allreduce averages)."""
    w = 1.0
    for _ in range(steps):
        w -= lr * sum(2.0 * (w * (r + 1) - 1.0) * (r + 1) for r in range(ranks)) / ranks
    return w


def run(case, rank, *args, options=("--hang-timeout", "8", "--hang-busy-timeout", "15"),
        backend="local"):
    return poprun("-np", "2", "--backend", backend, *options, sys.executable, CASES, case,
                  str(rank), *args, timeout=240)


TF_HANGS = [
    ("generator", 1, "blocked", r"no CPU and no I/O for \d+ s in a TensorFlow step, not "
                                r"computing \(a graph collective\); a TensorFlow thread in gen at "
                                r"hang_cases\.py:\d+"),
    ("fit", 1, "blocked", r"no CPU and no I/O for \d+ s in a TensorFlow step, not computing "
                          r"\(a graph collective\); a TensorFlow thread in gen at "
                          r"hang_cases\.py:\d+"),
    ("pyfunc", 0, "busy", r"it ran its own code \(CPU, I/O or a moving stack\) for \d+ s in a "
                          r"TensorFlow step, not computing \(a graph collective\); a TensorFlow "
                          r"thread in spin at hang_cases\.py:\d+"),
]


@pytest.fixture(scope="module")
def tf_hang_results():
    """The jobs of the test below, run side by side: each waits out its bound (8 or 15 s)."""
    return poprun_together({
        case: ["-np", "2", "--backend", "local", "--hang-timeout", "8", "--hang-busy-timeout",
               "15", sys.executable, CASES, case, str(rank)] for case, rank, *_ in TF_HANGS})


@pytest.mark.parametrize("case, rank, kind, evidence", TF_HANGS)
def test_a_hang_inside_tensorflow_is_cut_with_its_evidence(tf_hang_results, case, rank, kind,
                                                           evidence):
    result = tf_hang_results[case]
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = HUNG.search(err)
    assert found and int(found[1]) == rank and found[2] == kind, err[-4000:]
    assert re.match(evidence, found[3]), found[3]
    assert f"; its peers waited (instance {1 - rank} in a TensorFlow step" in found[3]
    bound = "bound 15 s (--hang-busy-timeout)" if kind == "busy" else "bound 8 s (--hang-timeout)"
    assert found[3].endswith(bound), found[3]
    assert "done rank" not in result.stdout


def test_graph_allreduces_named_differently_are_both_named_from_horovods_missing_ranks():
    # Horovod's MPI controller prints its stall inspector's "Missing ranks" (its Gloo controller
    # prints none): the mpi backend, as poprun-lite picks by default where mpirun exists.
    result = run("renamed", 1, backend="mpi")
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    for index, tensor in ((0, "other_grad"), (1, "grad")):
        assert re.search(rf"hang check: instance {index} \(host localhost\) was hung \(absent\): "
                         rf"it waited in a TensorFlow step, not computing \(a graph collective\) "
                         rf"for \d+ s, and Horovod's stall check names it missing from "
                         rf"'{tensor}'", err), err[-4000:]


def test_a_rank_left_alone_at_interpreter_exit_is_ended():
    # Rank 1 finishes, but a non-daemon thread keeps its interpreter alive after rank 0
    # exited 0: it is ended after the short bound, naming the thread.
    result = run("alone", 1)
    err = result.stderr
    assert result.returncode == 1, err[-4000:]
    found = HUNG.search(err)
    assert found and found[1] == "1" and found[2] == "alone", err[-4000:]
    assert re.match(r"its peers ended \d+ s ago and it waits at interpreter exit for a thread; "
                    r"thread heartbeat in heartbeat at hang_cases\.py:\d+", found[3]), found[3]
    assert len(re.findall(r"done rank \d weight", result.stdout)) == 2


NOT_CUT = [("report", 0), ("download", 0), ("sleep", 1), ("save", 0), ("import", 1)]


@pytest.fixture(scope="module")
def not_cut_results():
    """The jobs of the test below, run side by side: each waits 14 s, so together they wait
    once."""
    return poprun_together({
        (case, rank): ["-np", "2", "--backend", "local", "--hang-timeout", "6", sys.executable,
                       CASES, case, str(rank), "14"] for case, rank in NOT_CUT})


@pytest.mark.parametrize("case, rank", NOT_CUT)
def test_one_rank_working_or_sleeping_past_the_short_bounds_is_not_cut(not_cut_results, case,
                                                                       rank):
    # 14 s of NumPy, of a slow download before the first collective, of sleep, of pickle
    # writes or of an import that waits while the peer waits; --hang-timeout 6 (the short
    # bounds: passed by more than their own length), busy bound 600 s.
    result = not_cut_results[case, rank]
    assert result.returncode == 0, result.stderr[-4000:]
    assert "was hung" not in result.stderr
    weights = [float(w) for w in re.findall(r"done rank \d weight (\S+)", result.stdout)]
    assert len(weights) == 2 and weights[0] == weights[1], result.stdout[-2000:]
    assert weights[0] == pytest.approx(reference_weight(), abs=1e-12)


def test_horovod_mode_a_worker_working_after_a_commit_is_not_cut(tmp_path):
    # Rank 1 runs its own code for 20 s after a commit while rank 0 waits in its next step;
    # --hang-timeout 6: one round, the reference's weights.
    job = Job(tmp_path, ["-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
                         "horovod", "--hang-timeout", "6", "-x", "ELASTIC_HANG",
                         "elastic_loop.py"], env={"ELASTIC_HANG": "work:15"})
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    assert "was hung" not in text
    check_weights(job, loop_reference)
    assert [size for _, size, _ in rounds(text)] == [2], text[-5000:]
