"""The examples a user copies from, run as a user would: under poprun-lite."""
import importlib.util
import os
import re

import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
TF_STARTUP_LINE = re.compile(r"All log messages before absl::InitializeLog\(\) is called"
                             r"|\] oneDNN custom operations are on")


def final_accuracy(stdout: str) -> float:
    return float(re.findall(r"test accuracy (\d\.\d+)", stdout)[-1])


def test_custom_loop_example():
    result = poprun("-np", "2", "--num-replicas", "4", "examples/custom_loop.py", "--epochs", "3",
                    timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 replica(s), strategy popdist" in result.stdout
    assert final_accuracy(result.stdout) > 0.85


def test_keras_fit_example():
    result = poprun("-np", "2", "examples/keras_fit.py", "--epochs", "3", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert final_accuracy(result.stdout) > 0.85


@pytest.mark.parametrize("strategy", ["popdist", "multi-worker"])
def test_keras3_fit_example(strategy):
    result = poprun("-np", "2", "examples/keras3_fit.py", "--epochs", "3", "--strategy", strategy,
                    env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
                    timeout=600)
    if importlib.util.find_spec("tf_keras") is None:  # TensorFlow 2.15: Keras 2 only
        assert result.returncode == 2, result.stderr[-3000:]
        assert "this example is a Keras 3 program, and it has Keras 2." in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(rf"Keras 3\.\d+\.\d+, {strategy}, 2 instance\(s\)", result.stdout), \
        result.stdout
    checksums = re.findall(r"weights checksum (\d+\.\d+)", result.stdout)
    assert len(checksums) == 2 and checksums[0] == checksums[1], result.stdout
    assert final_accuracy(result.stdout) > 0.85


def test_cnn_estimator_example_matches_one_process(tmp_path):
    args = ["examples/cnn_estimator.py", "--epochs", "2", "--batches-per-step", "4"]
    two = poprun("-np", "2", *args, "--model-dir", str(tmp_path / "two"), timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    one = poprun("-np", "1", *args, "--model-dir", str(tmp_path / "one"), timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert final_accuracy(two.stdout) > 0.9
    assert abs(final_accuracy(two.stdout) - final_accuracy(one.stdout)) <= 0.01
    # `make demo` reads at a glance: the example's lines, one per epoch, no deprecation notices.
    assert len(re.findall(r"^\[0\]<stdout>:epoch +\d", two.stdout, re.M)) == 2, two.stdout
    # TensorFlow 2.16+'s C++ runtime announces itself before any log setting applies (absl's
    # "before absl::InitializeLog()" line and the oneDNN notice): not the example's lines.
    ours = [line for line in two.stderr.splitlines() if not TF_STARTUP_LINE.search(line)]
    assert "deprecated" not in two.stderr and len(ours) <= 4, two.stderr
