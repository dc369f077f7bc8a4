"""Graphcore's ``ipu.optimizers`` package imports its classes from its modules, so after
``from tensorflow.python import ipu`` alone a program reaches
``ipu.optimizers.cross_replica_optimizer.CrossReplicaOptimizer`` (and the other four module paths)
as attributes; ``ipu.config.StochasticRoundingBehaviour.from_bool`` turns the SDK's boolean
option into the enum (ON / OFF). Checked in a fresh process and under poprun-lite -np 2, where
the cross-replica optimizer's updates are those of the gradient averaged over the instances
(NumPy)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAM = str(Path(__file__).parent / "programs" / "ipu_module_paths.py")


def reference(count: int, steps: int = 3, lr: float = 0.1) -> np.ndarray:
    """Gradient descent on mean((x w - y)^2), the gradient averaged over ``count`` instances."""
    data = [(np.arange(8, dtype=np.float64).reshape(4, 2) / 8 + i,
             np.array([[1.0], [2.0], [3.0], [4.0]]) * (i + 1)) for i in range(count)]
    w = np.array([[0.5], [-0.5]])
    for _ in range(steps):
        grads = [2 / len(x) * x.T @ (x @ w - y) for x, y in data]
        w = w - lr * np.mean(grads, axis=0)
    return w.ravel()


def check(got, count, index=0):
    assert all(got["modules"].values()), got["modules"]
    assert got["esr"] == ["ON", "OFF", "ON" if index == 0 else "OFF"]
    assert got["same_classes"] == [True] * 5
    np.testing.assert_allclose(got["w"], reference(count), rtol=1e-5)
    if count > 1:  # the instances' own gradients alone would give other weights
        assert not np.allclose(got["w"], reference(1), rtol=1e-3)


def test_one_process(tmp_path):
    done = subprocess.run([sys.executable, PROGRAM, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    check(json.loads((tmp_path / "module-paths-0.json").read_text()), 1)


@pytest.mark.parametrize("tf1", [["--tf1"], []], ids=["tf1", "plain"])
def test_two_instances(tmp_path, tf1):
    done = poprun("-np", "2", *tf1, PROGRAM, str(tmp_path), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((tmp_path / f"module-paths-{i}.json").read_text()) for i in range(2)]
    for index, got in enumerate(results):
        check(got, 2, index)
    assert results[0]["w"] == results[1]["w"]
