"""TensorFlow 2.6 -> 2.15/2.21 bridges of the IPU layer (popdist_launcher.compat.keras_compat): a
program in the style of Graphcore's TF 2.6 SDK (moved Keras modules, a tensor steps_per_execution)
trains with exact numbers as one process, while a program that does not import the IPU layer sees
stock TensorFlow (Keras 2)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import KERAS_2

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def tf26(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf26")
    result = subprocess.run([sys.executable, str(PROGRAMS / "tf26_style.py"), str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "tf26.json").read_text())


def test_trains_with_exact_numbers(tf26):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32).astype(np.float64)
    y = rng.normal(size=(32, 1)).astype(np.float32).astype(np.float64)
    w = rng.normal(size=(3, 1)).astype(np.float32).astype(np.float64)
    for step in range(8):  # plain SGD, batches of 4, in order
        xb, yb = x[step * 4:(step + 1) * 4], y[step * 4:(step + 1) * 4]
        error = xb @ w - yb
        loss = float((error ** 2).mean())
        w = w - 0.1 * 2 * xb.T @ error / 4
    np.testing.assert_allclose(tf26["weights"], w.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf26["last_loss"], loss, rtol=1e-5)  # the 8th step's, pre-update
    assert tf26["steps_per_execution"] == 4


def test_keras_2_6s_seeds_and_expand_1d(tf26):
    # Keras 2.6: an initializer without a seed draws from TensorFlow's random ops, so a model
    # built twice after tf.random.set_seed starts from the same weights (keras_poprun_test builds
    # its PopDist and Horovod models so and compares them), and each call gives new values.
    assert tf26["same_seed_same_kernel"]
    assert tf26["unseeded_initializer_calls_differ"]
    # data_adapter.expand_1d: a trailing axis on rank-1 tensors only
    assert tf26["expand_1d"] == [[2, 1], [2, 3], None, "text"]


def test_moved_modules_are_keras_2_15s(tf26):
    assert tf26["optimizer_is_v2"]
    assert tf26["optimizer_v2_module"] == f"{KERAS_2}.src.optimizers.legacy.optimizer_v2"
    assert tf26["data_adapter_module"] == f"{KERAS_2}.src.engine.data_adapter"
    assert tf26["mnist_module"] == f"{KERAS_2}.src.datasets.mnist"
    # TensorFlow's own old copy, which TF 2.15+ still has, is Keras 2's in an IPU program too
    # (tests/graphcore/test_tf_python_keras.py), as tensorflow.python.keras was on Graphcore's SDK
    assert tf26["tf_legacy_module"] == f"{KERAS_2}.src.optimizers.legacy.optimizer_v2"
    assert tf26["tf_legacy_file"] == f"{KERAS_2}/src/optimizers/legacy/optimizer_v2.py"


PLAIN = """
import importlib, json, sys
import tensorflow as tf
seen = {}
for name in ("keras.optimizer_v2", "keras.engine.data_adapter", "tensorflow.python.keras.datasets"):
    try:
        importlib.import_module(name)
        seen[name] = "imported"
    except ModuleNotFoundError as error:
        seen[name] = str(error)
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
try:
    model.compile(loss="mse", steps_per_execution=tf.constant(4))
    seen["compile"] = "accepted"
except TypeError:
    seen["compile"] = "TypeError"
seen["ipu"] = "popdist_launcher.ipu" in sys.modules
seen["optimizer"] = type(tf.keras.optimizers.SGD()).__module__
def seeded_kernel():
    tf.random.set_seed(1234)
    layer = tf.keras.layers.Dense(3)
    layer.build((None, 4))
    return layer.kernel.numpy().tolist()
seen["same_seed_same_kernel"] = seeded_kernel() == seeded_kernel()
# TF1's batch normalization layer (stock TF 2.16+ looks for a module tf-keras does not have)
from tensorflow.python.layers import normalization
seen["tf1_batch_norm"] = normalization.BatchNormalization.__module__.endswith(
    "legacy_tf_layers.normalization")
print(json.dumps(seen))
"""


def test_a_program_without_the_ipu_layer_gets_the_moved_modules_and_stock_optimizers():
    # The moved modules and the tensor steps_per_execution come with TensorFlow's import, so
    # that a program gets them whatever the order of its imports; they only make work what
    # fails in stock Keras. The optimizers stay Keras 2.15's without the IPU layer.
    result = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"keras.optimizer_v2": "imported",
                    "keras.engine.data_adapter": "imported",
                    "tensorflow.python.keras.datasets": "imported",
                    "compile": "accepted", "ipu": False,
                    "optimizer": f"{KERAS_2}.src.optimizers.sgd",
                    # stock Keras 2.15+ seeds an unseeded initializer from Python's random
                    "same_seed_same_kernel": False, "tf1_batch_norm": True}
