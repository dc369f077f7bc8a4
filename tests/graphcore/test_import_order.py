"""What a program gets from the IPU layer does not depend on the order of its imports: a program
whose own modules bind Keras optimizer names and TF 2.6 Keras module paths before (and after)
the module that imports ``tensorflow.python.ipu`` gets TF 2.6's optimizers and modules under
every binding, exactly as when the IPU layer is imported first; checked against a NumPy TF 2.6
RMSprop (with ``lr`` and ``decay``), as one process and under poprun-lite -np 2."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import KERAS_2, poprun

PROGRAM = Path(__file__).parent / "programs" / "import_order" / "main.py"
LEGACY = f"{KERAS_2}.src.optimizers.legacy."
EXPECTED = {
    "RMSprop": LEGACY + "rmsprop.RMSprop", "RMSpropAfter": LEGACY + "rmsprop.RMSprop", "SGD": LEGACY + "gradient_descent.SGD",
    "KerasAdam": LEGACY + "adam.Adam", "rmsprop_module.RMSprop": LEGACY + "rmsprop.RMSprop",
    "data_adapter.DataHandler": f"{KERAS_2}.src.engine.data_adapter.DataHandler",
    "NewAdam": f"{KERAS_2}.src.optimizers.adam.Adam",  # tf.keras.optimizers.experimental stays 2.11+
}


def rmsprop_tf26(x, y, w, steps=4, lr=0.05, rho=0.9, eps=1e-8, decay=0.1):
    """TF 2.6's RMSprop on mean((x w - y)^2): rms from zeros, lr / (1 + decay * t)."""
    x, y, w = (np.asarray(a, np.float64) for a in (x, y, w))
    rms = np.zeros_like(w)
    for t in range(steps):
        grad = 2.0 / len(x) * x.T @ (x @ w - y)
        rms = rho * rms + (1 - rho) * grad ** 2
        w = w - lr / (1 + decay * t) * grad / (np.sqrt(rms) + eps)
    return w.ravel()


def check(got):
    for name, cls in got["classes"].items():
        module, _, short = name.partition(".")
        assert cls == EXPECTED[short], name
    assert got["models.optimizer"] == LEGACY + "rmsprop"
    reference = rmsprop_tf26(got["X"], got["Y"], got["W0"])
    for name, weights in got["weights"].items():
        np.testing.assert_allclose(weights, reference, rtol=1e-5, err_msg=name)


def run_one(tmp_path, *extra):
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path), *extra],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((tmp_path / "import-order-0.json").read_text())


@pytest.mark.slow
def test_import_order_one_process(tmp_path):
    (tmp_path / "first").mkdir()
    (tmp_path / "sorted").mkdir()
    first = run_one(tmp_path / "first", "ipu-first")
    usual = run_one(tmp_path / "sorted")
    check(first)
    check(usual)
    assert first["classes"] == usual["classes"]
    assert first["weights"] == usual["weights"]  # the same numbers, bit for bit


@pytest.mark.slow
def test_import_order_under_poprun(tmp_path):
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"import-order-{i}.json").read_text()) for i in range(2)]
    for got in runs:
        check(got)
    assert runs[0]["weights"] == runs[1]["weights"]
