"""TensorFlow 2.6's Keras optimizers under the IPU layer (popdist_launcher.compat.keras_compat) and
the loss the progress bar shows for a pipelined fit whose steps_per_execution exceeds the epoch's
steps: a Graphcore-style program checked against NumPy, as one process and under poprun-lite -np 2
(each instance trains on its own IPUStrategy)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import KERAS_2, poprun

PROGRAMS = Path(__file__).parent / "programs"
NAMES = ("SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl")
LEGACY = {"SGD": "gradient_descent", "Adam": "adam", "RMSprop": "rmsprop", "Adagrad": "adagrad",
          "Adadelta": "adadelta", "Adamax": "adamax", "Nadam": "nadam", "Ftrl": "ftrl"}


def rmsprop_reference(group: int, epochs: int = 2, lr=0.01, decay=0.1, rho=0.8, eps=1e-7):
    """TF 2.6's RMSprop (rms from zeros, lr / (1 + decay * t), g / (sqrt(rms) + eps)) on the
    program's two-layer linear model: batches of 2, one update per ``group`` batches with their
    gradients summed; returns the weights and each epoch's mean batch loss."""
    rng = np.random.default_rng(7)
    x, y, w1, w2 = (rng.normal(size=s).astype(np.float32).astype(np.float64)
                    for s in ((16, 3), (16, 1), (3, 2), (2, 1)))
    rms = [np.zeros_like(w1), np.zeros_like(w2)]
    losses, t = [], 0
    for _ in range(epochs):
        epoch = []
        for start in range(0, 8, group):
            grads = [np.zeros_like(w1), np.zeros_like(w2)]
            for b in range(start, start + group):
                xb, yb = x[2 * b:2 * b + 2], y[2 * b:2 * b + 2]
                hidden = xb @ w1
                error = hidden @ w2 - yb
                epoch.append(float((error ** 2).mean()))
                d_out = 2 * error / 2
                grads[0] += xb.T @ (d_out @ w2.T)
                grads[1] += hidden.T @ d_out
            rate = lr / (1 + decay * t)
            weights = [w1, w2]
            for i, g in enumerate(grads):
                rms[i] = rho * rms[i] + (1 - rho) * g ** 2
                weights[i] = weights[i] - rate * g / (np.sqrt(rms[i]) + eps)
            w1, w2 = weights
            t += 1
        losses.append(float(np.mean(epoch)))
    return [w1.ravel(), w2.ravel()], losses


def check(got):
    for name in NAMES:
        for where in ("tf.keras", "keras", "get", "deserialize"):
            assert got["classes"][f"{where}.{name}"] == [
                f"{KERAS_2}.src.optimizers.legacy.{LEGACY[name]}", name, True], (where, name)
    assert got["optimizer_base"]
    assert got["compile_by_name"] == f"{KERAS_2}.src.optimizers.legacy.rmsprop"
    # a config saved by a Keras 2.11+ optimizer still loads as one
    assert got["stock_config_class"] == f"{KERAS_2}.src.optimizers.adam"
    assert got["round_trip"] == ["RMSprop", {"name": "RMSprop", "learning_rate": 0.01,
                                             "decay": 0.1, "rho": 0.8, "momentum": 0.0,
                                             "epsilon": 1e-07, "centered": False}]
    assert got["wrappers"] == [f"{KERAS_2}.src.optimizers.legacy.gradient_descent",
                               f"{KERAS_2}.src.optimizers.sgd"]
    assert got["pipeline_output"] == f"{KERAS_2}.src.optimizers.sgd"
    assert got["plain_loaded"] == ["RMSprop", 0.1, 4]  # class, decay and step count restored
    # 2 data-parallel replicas (2 IPUs, one stage): one update per 2 batches; with gradient
    # accumulation 4 per replica: per 8; pipelined (2 stages, one replica), 4 micro-batches: per 4
    for kind, group in (("plain", 2), ("accumulated", 8), ("pipelined", 4)):
        weights, losses = rmsprop_reference(group)
        run = got[kind]
        assert run["optimizer"] == "RMSprop"
        for have, want in zip(run["weights"], weights):
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6, err_msg=kind)
        np.testing.assert_allclose(run["loss"], losses, rtol=1e-5, err_msg=kind)
        np.testing.assert_allclose(run["epoch_logs"], losses, rtol=1e-5, err_msg=kind)
        # what the progress bar shows after each epoch's last execution is the epoch's loss
        last = [loss for (batch, loss), (following, _) in
                zip(run["batch_logs"], run["batch_logs"][1:] + [[0, None]]) if following <= batch]
        np.testing.assert_allclose(last, losses, rtol=1e-5, err_msg=kind)
    assert [b for b, _ in got["pipelined"]["batch_logs"]] == [7, 7]  # one execution an epoch


@pytest.mark.slow
def test_tf26_optimizers_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAMS / "tf26_optimizers.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    check(json.loads((tmp_path / "tf26-optimizers-0.json").read_text()))


@pytest.mark.slow
def test_tf26_optimizers_under_poprun(tmp_path):
    result = poprun("-np", "2", str(PROGRAMS / "tf26_optimizers.py"), str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check(json.loads((tmp_path / f"tf26-optimizers-{index}.json").read_text()))


STOCK = """
import json, sys
import tensorflow as tf
from popdist_launcher.strategies import popdist_strategy  # the IPU layer, by the project's name
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
model.compile(optimizer="sgd", loss="mse")
try:
    tf.keras.optimizers.SGD(decay=0.1)
    decay = "accepted"
except ValueError:
    decay = "ValueError"
print(json.dumps([type(tf.keras.optimizers.SGD()).__module__, type(model.optimizer).__module__,
                  decay, "popdist_launcher.ipu_runtime.config" in sys.modules]))
"""


@pytest.mark.slow
def test_the_projects_own_names_keep_stock_optimizers():
    result = subprocess.run([sys.executable, "-c", STOCK], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [
        f"{KERAS_2}.src.optimizers.sgd", f"{KERAS_2}.src.optimizers.sgd", "ValueError", True]
