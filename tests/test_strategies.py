"""The three strategies under the launcher: semantics, and the core equivalence test (N instances
on a global batch end with the weights of one process on that batch)."""
import json

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
STRATEGIES = ["popdist", "horovod", "multi-worker"]


def run_worker(script, *args, np_=2, replicas=None, timeout=600):
    opts = ["-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
    result = poprun(*opts, f"tests/workers/{script}", *args, timeout=timeout)
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
        G = 2 * R
        assert got["batches"] == [list(range(s * G, (s + 1) * G)) for s in range(3)]
        np.testing.assert_allclose(got["bn_moving_mean"], got["bn_expected_mean"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["bn_moving_variance"], got["bn_expected_variance"], rtol=1e-4, atol=1e-5)


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
    run_worker("train_equivalence.py", mode, strategy, str(tmp_path), replicas=replicas)
    histories = [json.loads((tmp_path / f"{mode}-{i}.json").read_text())["history"] for i in range(2)]
    assert len(histories[0]) == len(reference) == 4
    for step, (a, b, ref) in enumerate(zip(*histories, reference)):
        assert a == b, f"instances differ after step {step}"
        np.testing.assert_allclose(a, ref, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")
