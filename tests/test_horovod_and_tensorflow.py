"""TensorFlow and Horovod programs with no launcher-specific code run under poprun-lite."""
import json

import numpy as np
import pytest

from conftest import poprun, program

pytestmark = pytest.mark.slow


def test_plain_hvd_init_works_without_horovodrun(tmp_path):
    result = poprun("-np", "4", program("hvd_allreduce.py"), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(4):
        got = json.loads((tmp_path / f"hvd-{rank}.json").read_text())
        assert got == {"rank": rank, "size": 4, "local_rank": rank, "local_size": 4,
                       "sum": 10.0, "gathered": [0, 1, 2, 3]}


def test_multi_worker_mirrored_strategy_on_launcher_tf_config(tmp_path):
    result = poprun("-np", "2", program("mwms_train.py"), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    w0 = json.loads((tmp_path / "mwms-0.json").read_text())
    w1 = json.loads((tmp_path / "mwms-1.json").read_text())
    assert w0["replicas"] == 2 and w0["w"] == w1["w"]
    # The same five SGD steps on the whole batch, computed by hand.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    w = np.zeros((4, 1), dtype="float32")
    for _ in range(5):
        w -= 0.1 * (2 * x.T @ (x @ w - y) / len(x))
    np.testing.assert_allclose(np.array(w0["w"]), w.ravel(), rtol=1e-5, atol=1e-6)


def test_demo_trains_across_instances():
    result = poprun("-np", "2", "examples/horovod_digits.py", "--epochs", "8",
                    "--min-accuracy", "0.9", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "weights identical on every instance: True" in result.stdout
    accuracy = float(result.stdout.split("test accuracy ")[1].split()[0])
    assert accuracy >= 0.9
