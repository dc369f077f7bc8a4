"""``keras.Input(batch_size=B)`` under PopDistStrategy builds the model with B, the micro-batch
each replica reads, as Graphcore's strategies do (their replicas each take the dataset's batch),
so a model that uses its static batch trains to the same weights and losses under
poprun-lite -np 2 as one process and as NumPy. Before, Keras divided B by the replicas in sync
(the strategy reported a global batch) and the first step failed on [2,1] vs [4,1]."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAM = Path(__file__).parent / "programs" / "fixed_batch_input.py"


def reference(x, y, w, lr=0.01, epochs=2, batch=4):
    x, y, w = (np.asarray(a, np.float64) for a in (x, y, w))
    features = np.concatenate([x, x * x], axis=1)
    fit = []
    for _ in range(epochs):
        losses = []
        for start in range(0, len(x), batch):
            f, t = features[start:start + batch], y[start:start + batch]
            losses.append(np.mean((f @ w - t) ** 2))
            w = w - lr * 2.0 / batch * f.T @ (f @ w - t)
        fit.append(np.mean(losses))
    evaluate = np.mean([np.mean((features[s:s + batch] @ w - y[s:s + batch]) ** 2)
                        for s in range(0, len(x), batch)])
    return w.ravel(), fit, evaluate


def check(got):
    assert got["built_batch"] == 4
    w, fit, evaluate = reference(got["X"], got["Y"], got["W0"])
    np.testing.assert_allclose(got["w"], w, rtol=1e-5)
    np.testing.assert_allclose(got["fit_loss"], fit, rtol=1e-5)
    np.testing.assert_allclose(got["evaluate"], evaluate, rtol=1e-5)


@pytest.mark.slow
def test_fixed_batch_one_process_and_under_poprun(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path / "one")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    one = json.loads((tmp_path / "one" / "fixed-batch-0.json").read_text())
    check(one)
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path / "two"), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        got = json.loads((tmp_path / "two" / f"fixed-batch-{index}.json").read_text())
        assert got["replicas"] == 2
        check(got)
        assert got["evaluate"] == one["evaluate"]  # the same number as one process
