"""With --tf1 (POPDIST_TF1=1) ``import tensorflow as tf`` also has TensorFlow 1.15's top-level
names that TensorFlow 2 dropped (``tf.Session``, ``tf.placeholder``, ``tf.train.Saver``...), and
its own ``tf.initializers``, ``tf.losses``, ``tf.metrics`` where TensorFlow 2 has Keras's, and
its initializer classes (``tf.random_uniform_initializer(..., dtype=...)``), as
Graphcore's TF1 SDKs had them; any other name both versions have keeps TensorFlow 2's meaning. A TF1
program checked against NumPy as one process and under poprun-lite -np 2 --tf1; without --tf1
TensorFlow's names are untouched."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import poprun

PROGRAM = str(Path(__file__).parent / "programs" / "tf1_top_level_names.py")


def reference(index: int, steps: int = 3, lr: float = 0.1):
    """Gradient descent on mean((x w - y)^2) with the instance's own data: weights, losses."""
    x = np.arange(8, dtype=np.float64).reshape(4, 2) / 8 + index
    y = np.array([[1.0], [2.0], [3.0], [4.0]])
    w, losses = np.array([[0.5], [-0.5]]), []
    for _ in range(steps):
        losses.append(float(np.mean((x @ w - y) ** 2)))  # the loss before the update
        w = w - lr * 2 / len(x) * x.T @ (x @ w - y)
    return w.ravel(), losses


def check(got, index, count):
    assert got["executing_eagerly"] is False and got["names_kept"] is True
    assert got["sum_of_indices"] == sum(range(count))
    w, losses = reference(index)
    np.testing.assert_allclose(got["w"], w, rtol=1e-5)
    np.testing.assert_allclose(got["restored"], w, rtol=1e-6)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    dtype, low, high = got["u"]
    assert dtype == "float64" and 2.0 <= low < 2.01 and 2.99 < high < 3.0
    assert got["k"] == [7, 7, 7]


def test_one_process(tmp_path):
    done = subprocess.run([sys.executable, PROGRAM, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "POPDIST_TF1": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    check(json.loads((tmp_path / "tf1-names-0.json").read_text()), 0, 1)


def test_two_instances(tmp_path):
    done = poprun("-np", "2", "--tf1", PROGRAM, str(tmp_path), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    for i in range(2):
        check(json.loads((tmp_path / f"tf1-names-{i}.json").read_text()), i, 2)


def test_without_tf1_tensorflow_2_names_are_untouched():
    code = ("import tensorflow as tf; print(hasattr(tf, 'Session'), hasattr(tf, 'placeholder'), "
            "hasattr(tf.train, 'Saver'), tf.executing_eagerly(), "
            "tf.losses.__name__.endswith('keras.losses'))")
    env = {k: v for k, v in os.environ.items() if k != "POPDIST_TF1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "False", "False", "True", "True"]
