"""What a program gets from the IPU layer does not depend on the order of its imports: a program
whose own modules bind every TF 2.6 Keras optimizer name and Keras module path before (and
after) the module that imports ``tensorflow.python.ipu`` -- also in a dict, a default argument
and a subclass -- gets TF 2.6's optimizers and modules under every binding, exactly as when the
IPU layer is imported first; checked against a NumPy TF 2.6 RMSprop (with ``lr`` and
``decay``), as one process and under poprun-lite -np 2. The same modules in a program that never
names Graphcore's modules keep stock Keras 2's optimizers."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import KERAS_2, poprun

PROGRAM = Path(__file__).parent / "programs" / "import_order" / "main.py"
STOCK_PROGRAM = Path(__file__).parent / "programs" / "import_order_stock" / "main.py"
LEGACY = f"{KERAS_2}.src.optimizers.legacy."
STOCK = f"{KERAS_2}.src.optimizers."
# name -> (its module under optimizers.legacy, under optimizers), TF 2.6's and Keras 2.11+'s
OPTIMIZERS = {"SGD": ("gradient_descent", "sgd"), "Adadelta": ("adadelta", "adadelta"),
              "Adagrad": ("adagrad", "adagrad"), "Adam": ("adam", "adam"),
              "Adamax": ("adamax", "adamax"), "Ftrl": ("ftrl", "ftrl"), "Nadam": ("nadam", "nadam"),
              "Optimizer": ("optimizer_v2", "optimizer"), "RMSprop": ("rmsprop", "rmsprop")}
MOVED = {  # TF 2.6 module paths, the same in every program
    "rmsprop_module.RMSprop": LEGACY + "rmsprop.RMSprop",
    "data_adapter.DataHandler": f"{KERAS_2}.src.engine.data_adapter.DataHandler",
    "NewAdam": STOCK + "adam.Adam",  # tf.keras.optimizers.experimental stays 2.11+
}
# the programs' other bindings -> the name they hold
HOLDS = {"RMSpropAfter": "RMSprop", "KerasAdam": "Adam", "BY_NAME.rmsprop": "RMSprop",
         "BY_NAME.sgd": "SGD", "KERAS_RMSPROP": "RMSprop", "TF_RMSPROP": "RMSprop",
         "ScaledRMSprop.base": "RMSprop", "make.default": "RMSprop"}


def expected(binding: str, ipu_program: bool) -> str:
    """The class a binding (``module.key``) holds in an IPU program, or in a stock one."""
    _, _, key = binding.partition(".")
    if key in MOVED:
        return MOVED[key]
    name = HOLDS.get(key, key)
    legacy, stock = OPTIMIZERS[name]
    if ipu_program:
        return LEGACY + f"{legacy}.{'OptimizerV2' if name == 'Optimizer' else name}"
    return STOCK + f"{stock}.{name}"


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
    assert len(got["classes"]) == 5 + 2 * (len(OPTIMIZERS) + 10)  # main's, models', late's
    for binding, cls in got["classes"].items():
        assert cls == expected(binding, ipu_program=True), binding
    assert got["models.optimizer"] == LEGACY + "rmsprop"
    assert len(got["weights"]) == 14
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


def check_stock(got):
    assert len(got["classes"]) == 2 * (len(OPTIMIZERS) + 10)
    for binding, cls in got["classes"].items():
        assert cls == expected(binding, ipu_program=False), binding
    assert got["decay"] == "ValueError"  # Keras 2.11+ refuses TF 2.6's decay=, as stock Keras does
    assert got["compile"] == STOCK + "rmsprop"
    assert got["ipu"] == []


@pytest.mark.slow
def test_a_program_without_graphcore_names_keeps_stock_optimizers(tmp_path):
    result = subprocess.run([sys.executable, str(STOCK_PROGRAM), str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    check_stock(json.loads((tmp_path / "stock-0.json").read_text()))


@pytest.mark.slow
def test_a_program_without_graphcore_names_keeps_stock_optimizers_under_poprun(tmp_path):
    result = poprun("-np", "2", str(STOCK_PROGRAM), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check_stock(json.loads((tmp_path / f"stock-{index}.json").read_text()))
