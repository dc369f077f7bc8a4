"""Loops compiled with ``tf.function(jit_compile=True)`` under the IPU layer (Graphcore's TF2
guide: ``next(iterator)`` in an on-device loop, ``ipu.loops.repeat`` over an infeed, outfeeds,
Horovod collectives) run with the numbers of the same loops written without ``jit_compile``
and of a NumPy reference, as one process (IPUStrategy) and under ``poprun-lite -np 2``
(PopDistStrategy, also with ``--num-replicas 4``; IPUMultiWorkerStrategy); a compiled function
that uses nothing of the IPU layer keeps TensorFlow's XLA; an outfeed reader thread whose
producer died is woken, so the program and the job end."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).parent / "programs"
STEPS, GLOBAL_BATCH, LR = 8, 8, 0.1
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 3)).astype(np.float32)
Y = rng.normal(size=(64, 1)).astype(np.float32)
W0 = rng.normal(size=(3, 1)).astype(np.float32)
TRAINING = ("guide_loop", "dataset_in_function", "repeat_over_infeed", "run_in_loop_scope",
            "run_in_loop_outside")


def reference():
    """SGD on the mean squared error of each global batch: final weights and each step's loss."""
    w, losses = W0.astype(np.float64), []
    for s in range(STEPS):
        rows = slice(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH)
        x, y = X[rows], Y[rows]
        error = x @ w - y
        losses.append(float((error ** 2).mean()))
        w = w - LR * 2 * x.T @ error / GLOBAL_BATCH
    return w.ravel(), np.array(losses)


def run_compiled_loops(out, strategy, *launcher_args):
    program = [str(PROGRAMS / "compiled_loops.py"), str(out), strategy]
    if launcher_args:
        result = poprun(*launcher_args, *program, timeout=900)
    else:
        result = subprocess.run([sys.executable, *program], capture_output=True, text=True,
                                timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads(p.read_text()) for p in sorted(out.glob("compiled-*.json"))]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return run_compiled_loops(tmp_path_factory.mktemp("one"), "ipu")


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory):
    return run_compiled_loops(tmp_path_factory.mktemp("np2"), "popdist", "-np", "2")


@pytest.fixture(scope="module")
def four_replicas(tmp_path_factory):
    return run_compiled_loops(tmp_path_factory.mktemp("r4"), "popdist", "-np", "2",
                              "--num-replicas", "4")


@pytest.fixture(scope="module")
def multi_worker(tmp_path_factory):
    return run_compiled_loops(tmp_path_factory.mktemp("mw"), "multi-worker", "-np", "2")


@pytest.fixture(params=["one_process", "two_instances", "four_replicas", "multi_worker"])
def runs(request):
    return request.getfixturevalue(request.param)


def test_compiled_loops_give_the_numbers_of_the_uncompiled_ones(runs):
    expected = {"infeed_per_replica", "collective"}
    if runs[0]["local_replicas"] == 1:
        expected |= {"guide_loop", "dataset_in_function", "repeat_over_infeed"}
    if runs[0]["strategy"] != "multi-worker":
        expected |= {"run_in_loop_scope", "run_in_loop_outside"}
    for result in runs:
        compiled = [k for k in result if k.endswith("_jit")]
        assert {k[:-len("_jit")] for k in compiled} == expected
        for key in compiled:
            assert result[key] == result[key[:-len("_jit")] + "_plain"], key


def test_training_loops_match_numpy(runs):
    w_ref, losses_ref = reference()
    for name in TRAINING:
        if name not in {k[:-len("_jit")] for k in runs[0] if k.endswith("_jit")}:
            continue  # several local replicas: see the program
        assert len({json.dumps(r[f"{name}_jit"]["w"]) for r in runs}) == 1, name  # identical
        np.testing.assert_allclose(runs[0][f"{name}_jit"]["w"], w_ref, rtol=1e-5, err_msg=name)
        # Each replica enqueued its part of the global mean loss, once per step.
        losses = sum(np.asarray(r[f"{name}_jit"]["losses"]) for r in runs)
        losses = losses.reshape(STEPS, -1).sum(axis=1)
        np.testing.assert_allclose(losses, losses_ref, rtol=1e-5, err_msg=name)


def test_outfeed_of_infeed_loop_holds_every_enqueue(one_process, two_instances):
    for runs in (one_process, two_instances):
        for result in runs:
            assert result["repeat_over_infeed_jit"]["rows"] == [GLOBAL_BATCH // len(runs)] * STEPS
            np.testing.assert_allclose(result["repeat_over_infeed_jit"]["total"],
                                       [sum(result["repeat_over_infeed_jit"]["losses"])],
                                       rtol=1e-5)
    total = sum(r["dataset_in_function_jit"]["total"] for r in two_instances)
    np.testing.assert_allclose(total, reference()[1].sum(), rtol=1e-5)


def test_infeed_gives_each_replica_its_own_elements(runs):
    instances, replicas = runs[0]["instances"], runs[0]["local_replicas"]
    rows = GLOBAL_BATCH // (instances * replicas)
    seen = []
    for i, result in enumerate(runs):
        x_sums = np.asarray(result["infeed_per_replica_jit"]["x_sums"]).reshape(STEPS, replicas)
        for r in range(replicas):
            batches = [(s * replicas + r) * instances + i for s in range(STEPS)]
            seen += batches
            np.testing.assert_allclose(x_sums[:, r], [X[b * rows:(b + 1) * rows].sum()
                                                      for b in batches], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(result["infeed_per_replica_jit"]["y_sums"][r],
                                       sum(Y[b * rows:(b + 1) * rows].sum() for b in batches),
                                       rtol=1e-5, atol=1e-5)
    assert sorted(seen) == list(range(64 // rows))  # every sample once


def test_collective_inside_a_compiled_function(one_process, two_instances, multi_worker):
    assert [r["collective_jit"] for r in one_process] == [1.0]
    assert [r["collective_jit"] for r in two_instances + multi_worker] == [3.0] * 4


def test_compiled_function_outside_the_ipu_layer_keeps_xla(one_process, four_replicas):
    for result in one_process + four_replicas:
        assert result["pure"] == {"outside": "XLA refused", "inside": 4}


def test_outfeed_reader_of_a_dead_main_thread_ends_the_job(tmp_path):
    result = poprun("-np", "2", str(PROGRAMS / "outfeed_reader_crash.py"), str(tmp_path),
                    timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("job failed: root cause"):]
    failed = re.search(r"instance (\d) exited with code 1", summary)
    assert failed, summary
    assert "RuntimeError: the training loop failed after 3 of 100 steps" in summary
    # The failed instance's reader drained what was enqueued, then was woken (the other
    # instance may have been stopped by poprun-lite before its reader got there).
    seen, message = (tmp_path / f"reader-{failed.group(1)}.txt").read_text().splitlines()
    assert seen == "[0.0, 1.0, 2.0]"
    assert "every thread that could enqueue into it has ended (MainThread)" in message
