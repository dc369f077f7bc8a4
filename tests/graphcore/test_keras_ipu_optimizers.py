"""keras.ipu.optimizers and keras.ipu.layers against NumPy: ALS (loss scaling factor trajectory
by Graphcore's rule, float16 histogram, weights equal to the unscaled optimizer), gradient
accumulation (one update per N calls), and Graphcore's 2 replicas of a non-pipelined model on an
IPUStrategy that TensorFlow started with one device (one process and under poprun-lite -np 2)
and of an IPUEstimator with IPURunConfig(num_replicas=2) (one process)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAMS = Path(__file__).parent / "programs"
rng = np.random.default_rng(5)
X = rng.normal(size=(16, 3)).astype(np.float32).astype(np.float64)
Y = rng.normal(size=(16, 1)).astype(np.float32).astype(np.float64)
W = rng.normal(size=(3, 1)).astype(np.float32).astype(np.float64)


def grad(w, x, y):
    return 2 * x.T @ (x @ w - y) / len(x)


def sgd(batches_per_update, lr=0.1, epochs=1, scale=1.0, batch=2, w=None):
    """Linear model, MSE: each update sums the gradients of ``batches_per_update`` consecutive
    batches (times ``scale``). Returns the weights and each epoch's mean batch loss."""
    w, losses = (W if w is None else w).copy(), []
    batches = [(X[i:i + batch], Y[i:i + batch]) for i in range(0, len(X), batch)]
    for _ in range(epochs):
        epoch = []
        for u in range(len(batches) // batches_per_update):
            g = np.zeros_like(w)
            for x, y in batches[u * batches_per_update:(u + 1) * batches_per_update]:
                g += grad(w, x, y)
                epoch.append(float(((x @ w - y) ** 2).mean()))
            w = w - lr * scale * g
        losses.append(float(np.mean(epoch)))
    return w, losses


def als_trajectory(calls, lsf, freq, inc, maximum, threshold=10e-6, edge=2.0 ** 13, c=None):
    """Graphcore's ALS rule over ``calls`` apply_gradients calls whose float16 gradients are
    ``c`` x LSF (``c`` None: float32 gradients only, an empty histogram). Returns
    [(lsf, histogram)] after each call."""
    n, hist, out = 0, np.zeros(2), []
    for _ in range(calls):
        due = freq == 1 or (n > 0 and n % freq == 0)
        if c is not None:
            scaled = np.abs(c * lsf)
            hist = hist + [np.sum(scaled < edge), np.sum(scaled >= edge)]
        if due:
            ratio = hist[1] / hist.sum() if hist.sum() else float("nan")  # NaN: no overflow
            new = lsf / inc if ratio > threshold else lsf * inc
            lsf = lsf if not np.isfinite(new) or new >= maximum or new < 1 else new
            hist, n = np.zeros(2), 0
        else:
            n += 1
        out.append((lsf, hist.tolist()))
    return out


def ga_reference(updates):
    """Weights after each of ``updates`` updates that sum 2 batches (SGD 0.1)."""
    w, history = W.copy(), []
    for u in range(updates):
        w = w - 0.1 * sum(grad(w, X[i:i + 2], Y[i:i + 2]) for i in (4 * u, 4 * u + 2))
        history.append(w)
    return history


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.ravel(want), rtol=rtol,
                               atol=atol)


def check(got):
    # A: ALS around SGD in Keras fit, float32: weights are SGD's; the LSF doubles on every
    # third call (the counter restarts at 0 after an update) and stays below the maximum.
    fit = got["als_fit"]
    close(fit["w"], sgd(1)[0])
    trajectory = als_trajectory(8, 1.0, freq=2, inc=2, maximum=8)
    assert fit["lsf"] == [lsf for lsf, _ in trajectory] == [1, 1, 2, 2, 2, 4, 4, 4]
    assert (fit["prev"], fit["counter"], fit["iterations"]) == (2.0, 2, 8)
    assert fit["histogram"] == [0.0, 0.0]
    close([fit["lr"], fit["lr_set"]], [0.1, 0.5])  # the wrapped SGD's learning rate
    assert fit["config"] == [2, 8, "SGD"]
    assert got["als_configs"] == {"ALSOptimizerSGD": True, "ALSOptimizerAdam": True,
                                     "ALSOptimizerRMSProp": True}
    # B: float16 gradients c x LSF against the bin edge 64: down when > 20% overflow, up again.
    c = np.array([0.5, 1.0, 2.0, 40.0])
    want = als_trajectory(9, 2.0, freq=2, inc=2, maximum=64, threshold=0.2, edge=64, c=c)
    assert [tuple(t) for t in got["als_fp16"]["trace"]] == want
    assert [lsf for lsf, _ in want] == [2, 2, 1, 1, 1, 2, 2, 2, 1]
    w16 = np.ones(4, np.float16)
    for _ in range(9):  # SGD in float16 on the unscaled gradients (c, exactly)
        w16 = w16 - np.float16(0.01) * c.astype(np.float16)
    close(got["als_fp16"]["w"], w16, rtol=1e-3, atol=0)
    # C: ALS with accumulation of 2 in a compiled loop: weights move every second call, by
    # the summed unscaled gradients; the LSF (update_frequency 1) is 2, below the maximum 4.
    ga = got["als_ga"]
    assert [applied for applied, _, _ in ga] == [False, True, False, True]
    assert [lsf for _, lsf, _ in ga] == [2.0] * 4
    first, second = ga_reference(2)
    close(ga[0][2], W)
    close(ga[1][2], first)
    close(ga[2][2], first)
    close(ga[3][2], second)
    # D: GradientAccumulationOptimizer, MEAN of 2, around a Keras 2.11+ SGD, in Keras fit.
    d = got["ga_fit"]
    close(d["w"], sgd(2, scale=0.5)[0])
    assert (d["calls"], d["updates"], d["same"]) == (8, 4, "SGD")
    # E: 2 replicas: each step reads the next batch of each replica, gradients summed.
    rep = got["replicas"]
    w, losses = sgd(2, epochs=2)
    close(rep["w"], w)
    close(rep["loss"], losses)
    close(rep["evaluate"], float(((X @ w - Y) ** 2).mean()))
    close(rep["predict"], X @ w)
    # 2 replicas x 2 micro-batches, SUM: one update per 4 batches; ALS counts 8 micro-batches.
    close(got["replicas_ga_als"]["w"], sgd(4)[0])
    assert got["replicas_ga_als"]["counter"] == 4  # each replica: 4 micro-batches, none due (8)
    close(got["capture_w"], sgd(2)[0])  # CaptureUpstreamGradients changes no number


@pytest.mark.slow
def test_keras_ipu_optimizers_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAMS / "keras_ipu_optimizers.py"),
                             str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    check(json.loads((tmp_path / "keras-ipu-optimizers-0.json").read_text()))


@pytest.mark.slow
def test_keras_ipu_optimizers_under_poprun(tmp_path):
    # Each instance runs its own IPUStrategy replicas (no popdist set_ipu_config), as one process.
    result = poprun("-np", "2", str(PROGRAMS / "keras_ipu_optimizers.py"), str(tmp_path),
                    timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check(json.loads((tmp_path / f"keras-ipu-optimizers-{index}.json").read_text()))


@pytest.mark.slow
def test_ipu_estimator_num_replicas_two_in_one_process(tmp_path):
    # IPURunConfig(num_replicas=2) with ipu_options selecting 2 IPUs: 2 replicas, each step
    # replica r reads batch 2s + r, CrossReplicaOptimizer averages their gradients.
    result = subprocess.run([sys.executable, str(PROGRAMS / "ipu_estimator_replicas.py"),
                             str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads((tmp_path / "ipu-estimator-replicas.json").read_text())
    assert (got["step"], got["replicas"]) == (4, 2)
    close(got["w"], sgd(2, scale=0.5)[0])
