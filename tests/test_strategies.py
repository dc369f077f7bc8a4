"""The three strategies under the launcher: semantics, and the core equivalence test (N instances
on a global batch end with the weights of one process on that batch), with Keras 2 and, on
TensorFlow 2.16+, Keras 3 (what a program that is not written for Keras 2 gets)."""
import json

import numpy as np
import pytest

from conftest import KERAS_2, LEGACY_KERAS, job_environ, poprun

pytestmark = pytest.mark.slow
STRATEGIES = ["popdist", "horovod", "multi-worker"]


KERAS_3_STACK = KERAS_2 == "tf_keras"  # TensorFlow 2.16+: Keras 3 unless the program is Keras 2
LEGACY = ["-x", "TF_USE_LEGACY_KERAS=1"] if KERAS_3_STACK else []


def run_worker(script, *args, np_=2, replicas=None, timeout=600, opts=(), env=None):
    opts = [*opts, "-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
    result = poprun(*opts, f"tests/workers/{script}", *args, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("replicas", [None, 4])
def test_semantics(tmp_path, strategy, replicas):
    run_worker("strategy_semantics.py", strategy, str(tmp_path), replicas=replicas)
    R = replicas or 2
    ids = list(range(R))
    for i in range(2):
        got = json.loads((tmp_path / f"semantics-{i}.json").read_text())
        assert got["num_replicas_in_sync"] == R
        assert got["should_checkpoint"] == (i == 0)
        assert got["initial"] == 1.0  # instance 0's initial value, everywhere
        assert got["on_read_mean"] == pytest.approx(np.mean(ids))
        assert got["on_read_sum"] == pytest.approx(sum(ids))
        assert got["reduce_sum"] == pytest.approx(sum(ids))
        assert got["reduce_mean"] == pytest.approx(np.mean(ids))
        assert "not supported" in got["reduce_max_error"]
        if strategy != "multi-worker":
            # float: the exact mean; integer: its exact sum floor-divided by the replicas
            assert got["mixed_mean"] == [np.mean(ids) + 0.5, sum(3 * r + 1 for r in ids) // R]
        G = 2 * R
        assert got["batches"] == [list(range(s * G, (s + 1) * G)) for s in range(3)]
        np.testing.assert_allclose(got["bn_moving_mean"], got["bn_expected_mean"],
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["bn_moving_variance"], got["bn_expected_variance"],
                                   rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    run_worker("train_equivalence.py", "reference", "none", str(out), np_=1)
    return json.loads((out / "reference-0.json").read_text())["history"]


@pytest.mark.parametrize("mode, strategy, replicas", [
    ("tf2", "popdist", 4),
    ("tf2", "horovod", None),
    ("tf2", "horovod", 4),
    ("tf2", "multi-worker", 4),
    ("tf1", "popdist", 4),
    ("tf1", "horovod", None),
    ("keras", "popdist", None),
    ("keras", "popdist", 4),
])
def test_equivalence_with_one_process(tmp_path, reference, mode, strategy, replicas):
    """Keras 2 (the program asks for it with TF_USE_LEGACY_KERAS=1 on TensorFlow 2.16+)."""
    assert_equivalent(tmp_path, reference, mode, strategy, replicas=replicas, opts=LEGACY,
                      keras="2")


@pytest.mark.skipif(not KERAS_3_STACK, reason="TensorFlow 2.15 has no Keras 3")
@pytest.mark.parametrize("mode, strategy, np_, replicas", [
    ("keras", "popdist", 2, None),
    ("keras", "popdist", 2, 4),
    ("keras", "popdist", 4, None),
    ("keras", "horovod", 2, None),
    ("keras", "horovod", 2, 4),
    ("keras", "multi-worker", 2, None),
    ("keras", "multi-worker", 4, None),
    ("keras-loop", "popdist", 2, None),
    ("keras-loop", "popdist", 4, None),
    ("keras-loop", "horovod", 2, None),
    ("keras-loop", "horovod", 4, None),
    ("keras-loop", "multi-worker", 2, None),
])
def test_keras_3_equivalence_with_one_process(tmp_path, reference, mode, strategy, np_, replicas):
    """Keras 3 fit and custom loops (Keras layers and optimizer made under strategy.scope()) on
    a program that is not written for Keras 2: the weights of one process on the same batch."""
    assert_equivalent(tmp_path, reference, mode, strategy, np_=np_, replicas=replicas, keras="3")


def assert_equivalent(tmp_path, reference, mode, strategy, np_=2, replicas=None, opts=(),
                      keras=None):
    env = {k: v for k, v in job_environ().items() if k != LEGACY_KERAS} if keras == "3" else None
    run_worker("train_equivalence.py", mode, strategy, str(tmp_path), np_=np_, replicas=replicas,
               opts=opts, env=env)
    results = [json.loads((tmp_path / f"{mode}-{i}.json").read_text()) for i in range(np_)]
    if KERAS_3_STACK and keras is not None:
        assert [r["keras"] for r in results] == [keras] * np_
    histories = [r["history"] for r in results]
    assert len(histories[0]) == len(reference) == 4
    for step, (first, *others, ref) in enumerate(zip(*histories, reference)):
        assert all(other == first for other in others), f"instances differ after step {step}"
        np.testing.assert_allclose(first, ref, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")
