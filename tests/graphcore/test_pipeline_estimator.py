"""IPUPipelineEstimator as Graphcore documents it: iterations_per_loop counts micro-batches (one
weight update per gradient_accumulation_count of them, SUM or MEAN), the global step advances by
iterations_per_loop per run, the logged loss is the run's mean micro-batch loss, eval_metrics_fn
sees every micro-batch of every replica, predict yields the last stage's outputs; exact vs NumPy
as one process and under ``poprun-lite -np 2``."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
PROGRAM = str(Path(__file__).parent / "programs" / "pipeline_estimator.py")
GAC, UPDATES, BATCH, LR = 4, 2, 2, 0.05
rng = np.random.default_rng(7)
X = rng.normal(size=(64, 3)).astype("float32").astype(np.float64)
Y = (X.astype("float32") @ np.array([[1.0], [-2.0], [0.5]]) + 0.25).astype("float32")
Y = Y.astype(np.float64)
W0 = np.array([[0.1], [0.2], [0.3]], "float32").astype(np.float64)


def micro_batches(replica, replicas):
    x, y = X[replica::replicas], Y[replica::replicas]
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, GAC * UPDATES * BATCH, BATCH)]


def reference(method, replicas):
    """Two train() calls of one run each (each restarts the input): per update, each replica
    accumulates its GAC micro-batches' gradients (divided by GAC for MEAN); the update takes
    the mean over replicas. Returns w, b, and each run's mean micro-batch loss."""
    w, b, run_losses = W0.copy(), 0.0, []
    for _ in range(2):
        losses = []
        for u in range(UPDATES):
            gw, gb = np.zeros_like(w), 0.0
            for r in range(replicas):
                for x, y in micro_batches(r, replicas)[u * GAC:(u + 1) * GAC]:
                    e = x @ w + b - y
                    losses.append(float((e ** 2).mean()))
                    gw += x.T @ (2 * e / len(x)) / replicas
                    gb += float((2 * e / len(x)).sum()) / replicas
            scale = 1.0 / GAC if method == "MEAN" else 1.0
            w, b = w - LR * scale * gw, b - LR * scale * gb
        run_losses.append(float(np.mean(losses)))
    return w, b, run_losses


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=1e-6)


def load(out, n):
    return [json.loads((out / f"pipeline-estimator-{i}.json").read_text()) for i in range(n)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    env = {**os.environ, "PIPELINE_MODEL_DIR": str(out)}
    result = subprocess.run([sys.executable, PROGRAM, str(out)], capture_output=True, text=True,
                            env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return load(out, 1)


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    result = poprun("-np", "2", "--env", f"PIPELINE_MODEL_DIR={out}", PROGRAM, str(out),
                    timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return load(out, 2)


def check(runs, replicas):
    for method in ("SUM", "MEAN"):
        w, b, _ = reference(method, replicas)
        for got in runs:
            close(got[method]["w"], w.ravel())
            close(got[method]["b"], [b])
            # iterations_per_loop (8) micro-batches per run: the global step advances by 8
            assert got[method]["global_steps"] == [8, 16]
    w, b, losses = reference("SUM", replicas)
    close(runs[0]["logged_losses"], losses)  # the chief's summaries: one loss per run
    seen = [micro_batches(r, replicas) for r in range(replicas)]
    x = np.concatenate([mx for batches in seen for mx, _ in batches])
    y = np.concatenate([my for batches in seen for _, my in batches])
    mse = float(((x @ w + b - y) ** 2).mean())
    for i, got in enumerate(runs):
        assert got["eval"]["global_step"] == 16
        close(got["eval"]["mse"], mse)  # every micro-batch of every replica
        close(got["eval"]["loss"], mse)  # the mean of the micro-batch losses (equal batches)
        assert got["eval"]["count"] == 16 * replicas
        own = X[i::replicas] @ w + b
        close(got["predict"], own[:5].ravel())  # num_predictions=5, one example at a time
        close(got["predict_batches"], own[:4].reshape(2, 2))  # one micro-batch at a time


def test_one_process_matches_numpy(one_process):
    check(one_process, replicas=1)


def test_two_instances_match_numpy(two_instances):
    check(two_instances, replicas=2)


def test_graphcore_checks_with_its_messages(one_process):
    errors = one_process[0]["errors"]
    assert "must not have `features` or `labels` arguments" in errors["features"]
    assert errors["not_divisible"] == ("`IPURunConfig.iterations_per_loop` (got 6) must be "
                                       "divisible by `gradient_accumulation_count` (got 4)")
    assert "must contain `optimizer_function` when training" in errors["spec"]
