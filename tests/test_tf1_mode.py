"""--tf1 / POPDIST_TF1=1: TensorFlow 1 programs as Graphcore's TF1 SDKs ran them (graph mode), under
poprun-lite -np 2 and as one plain process, exact against NumPy; without it, the failure summary
names --tf1 once; the option's variable, config key and backends; the site hook stays lazy."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from popdist_launcher.launcher.output import report
from tests.conftest import PROGRAMS, poprun, program

TRUE_W = np.array([[1.0], [-2.0], [0.5], [3.0]])
GLOBAL_BATCH, STEPS, RUNS, LR = 8, 3, 2, 0.05  # as tests/programs/tf1_train.py


def python(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def read(out, prefix, n):
    return [json.loads((out / f"{prefix}-{i}.json").read_text()) for i in range(n)]


def reference(instances):
    """Weights after every step's gradient averaged over the instances (the mean over the global
    batch), and each instance's loss on its own shard at each step, before the update."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS * RUNS, 4)).astype("float32")
    y = (x @ TRUE_W + 0.25).astype("float32").astype(np.float64)
    x = x.astype(np.float64)
    w, b = np.zeros((4, 1)), 0.0
    losses = [[] for _ in range(instances)]
    for step in range(STEPS * RUNS):
        xs, ys = x[step * GLOBAL_BATCH:][:GLOBAL_BATCH], y[step * GLOBAL_BATCH:][:GLOBAL_BATCH]
        for r in range(instances):  # dataset.shard(instances, r): rows r, r + n, ...
            losses[r].append(float(np.mean((xs[r::instances] @ w + b - ys[r::instances]) ** 2)))
        error = xs @ w + b - ys
        w, b = w - LR * 2 * xs.T @ error / len(xs), b - LR * 2 * float(np.mean(error))
    return w.ravel(), b, losses


@pytest.fixture(scope="module")
def tf1_runs(tmp_path_factory):
    two, one = tmp_path_factory.mktemp("tf1-np2"), tmp_path_factory.mktemp("tf1-one")
    result = poprun("-np", "2", "--tf1", program("tf1_train.py"), str(two), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    single = python(program("tf1_train.py"), str(one), env={**os.environ, "POPDIST_TF1": "1"})
    assert single.returncode == 0, single.stderr[-4000:]
    return read(two, "tf1", 2), read(one, "tf1", 1)[0]


@pytest.mark.slow
def test_a_tf1_program_trains_in_graph_mode_as_numpy_says(tf1_runs):
    runs, single = tf1_runs
    for run in runs + [single]:
        # TensorFlow 1.15's defaults: graph mode; tf.get_variable makes a reference variable
        # unless the scope asks for a resource one
        assert run["eager"] is False
        assert run["variables"] == ["RefVariable", "ResourceVariable"]
    assert [r["instances"] for r in runs] == [2, 2] and single["instances"] == 1
    w, b, losses = reference(2)
    assert runs[0]["w"] == runs[1]["w"] and runs[0]["b"] == runs[1]["b"]
    for run in (runs[0], single):  # instance 1 started from b = 1: the broadcast made it 0
        np.testing.assert_allclose(run["w"], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run["b"], b, rtol=1e-5, atol=1e-6)
    for r, run in enumerate(runs):  # the outfeed: every step's loss, in order, on its shard
        np.testing.assert_allclose(run["losses"], losses[r], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run["totals"], np.reshape(losses[r], (RUNS, STEPS)).sum(1),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(single["losses"], reference(1)[2][0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_without_tf1_the_summary_names_it_once(tmp_path):
    result = poprun("-np", "2", "--backend", "local", program("tf1_train.py"), str(tmp_path),
                    timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "should be a function when eager execution is enabled" in result.stderr
    hints = [line for line in result.stderr.splitlines() if "--tf1" in line]
    assert hints == ["poprun-lite: " + report.TF1_HINT], result.stderr[-3000:]
    assert not list(tmp_path.glob("tf1-*.json"))


@pytest.mark.slow
def test_the_ipu_estimator_under_tf1_matches_one_tf2_process(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    estimator = str(PROGRAMS.parent / "programs_ipu" / "ipu_estimator.py")
    single = python(estimator, str(one), str(one / "model"))
    assert single.returncode == 0, single.stderr[-4000:]
    result = poprun("-np", "2", "--tf1", estimator, str(two), str(two / "model"), "multi-worker",
                    timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    (expected,), runs = read(one, "estimator", 1), read(two, "estimator", 2)
    assert runs[0]["weights"] == runs[1]["weights"]
    np.testing.assert_allclose(runs[0]["weights"], expected["weights"], rtol=1e-6, atol=1e-6)
    assert sorted(runs[0]["seen"] + runs[1]["seen"]) == sorted(expected["seen"])


def test_the_hook_imports_nothing_until_tensorflow_and_applies_to_compat_v1_first():
    env = {**os.environ, "POPDIST_TF1": "1"}
    lazy = python("-c", "import sys; print(sorted(m for m in sys.modules "
                  "if m.startswith(('tensorflow', 'popdist_launcher.compat.tf1'))))", env=env)
    assert lazy.returncode == 0 and lazy.stdout.split() == ["[]"], lazy.stderr
    # a program whose first import is tensorflow.compat.v1 gets TensorFlow 1.15's defaults
    code = ("import tensorflow.compat.v1 as tf\n"
            "from tensorflow.python.ops import control_flow_util\n"
            "from tensorflow.python import tf2\n"
            "print(tf.executing_eagerly(), tf2.enabled(), control_flow_util.ENABLE_CONTROL_FLOW_V2,"
            " tf.resource_variables_enabled())\n")
    tf1 = python("-c", code, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert tf1.returncode == 0, tf1.stderr[-3000:]
    assert tf1.stdout.split() == ["False"] * 4
    assert "non-resource variables" not in tf1.stderr  # TF 1.15 said nothing of its defaults
    tf2 = python("-c", code, env={**os.environ, "POPDIST_TF1": "0", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert tf2.stdout.split() == ["True"] * 4, tf2.stderr[-3000:]


def test_tf1_variable_config_key_and_print_topology(tmp_path):
    env = {**os.environ, "POPRUN_TF1": "1"}
    shown = poprun("-np", "2", "--evaluator", "--print-topology", "true", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("  POPDIST_TF1=1\n") == 3  # both instances and the evaluator
    assert "POPDIST_TF1" not in poprun("-np", "2", "--print-topology", "true").stdout
    config = tmp_path / "run.toml"
    config.write_text("tf1 = true\n")
    shown = poprun("--config", str(config), "-np", "2", "--print-topology", "true")
    assert shown.returncode == 0 and shown.stdout.count("POPDIST_TF1=1") == 2, shown.stderr
    config.write_text('tf1 = "yes"\n')
    bad = poprun("--config", str(config), "true")
    assert bad.returncode == 2 and "tf1 = 'yes' is not true or false" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("backend", ["local", "mpi"])
def test_both_backends_pass_popdist_tf1(tmp_path, backend):
    result = poprun("-np", "2", "--backend", backend, "--tf1", program("dump_env.py"),
                    str(tmp_path))
    assert result.returncode == 0, result.stderr
    for i in range(2):
        assert json.loads((tmp_path / f"instance-{i}.json").read_text())["POPDIST_TF1"] == "1"
