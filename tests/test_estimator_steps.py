"""The IPUEstimator's global step across train() calls and jobs: a job resumes from the latest
checkpoint of its model_dir with the weights of one process that trained as often, and every
train() call advances the global step by exactly its steps. The distributed equivalence is in
test_estimator.py, whose ``run`` starts the jobs here too."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_estimator import assert_same_model, run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resumed_reference(tmp_path_factory):
    """One process calling train(2) twice (each train() restarts the input pipeline, as in
    tf.estimator): what both strategies' resumed jobs must end with."""
    single, (expected,) = run(tmp_path_factory.mktemp("resumed"), "single", "--resume-steps", "2",
                              "--steps", "2", np_=1)
    assert single.returncode == 0, single.stderr[-3000:]
    assert expected["global_step"] == 4
    return expected


@pytest.mark.parametrize("strategy", ["popdist", "multi-worker"])
def test_resume_from_the_latest_checkpoint(tmp_path, resumed_reference, strategy):
    # Two jobs of 2 steps on one model_dir == one process calling train(2) twice.
    model_dir = tmp_path / "shared-model"
    first, runs = run(tmp_path, "first", "--steps", "2", model_dir=model_dir, strategy=strategy)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [r["global_step"] for r in runs] == [2, 2]
    second, runs = run(tmp_path, "second", "--steps", "2", model_dir=model_dir, strategy=strategy)
    assert second.returncode == 0, second.stderr[-3000:]
    for got in runs:
        assert_same_model(got, resumed_reference)


@pytest.mark.parametrize("tf1", ["0", "1"], ids=["tf2", "tf1"])
def test_every_train_call_advances_the_global_step_exactly(tmp_path, tf1):
    # The loop reads the step it starts from before any step's own increment of the global step
    # (minimize(global_step=...), the model_fn's assign_add, host_call's apply_gradients). 72
    # train() calls on a tiny model; more inter-op threads than cores let a misordered read show.
    env = {**os.environ, "TF_NUM_INTEROP_THREADS": "8", "POPDIST_TF1": tf1}
    result = subprocess.run([sys.executable, "tests/workers/estimator_step_count.py",
                             str(tmp_path), "12"], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads((tmp_path / "step-count.json").read_text())
    assert len(records) == 72
    wrong = [r for r in records if r["global_step"] != r["expected"]]
    assert wrong == []
    assert records[-1]["global_step"] == 2 * 18  # 12 calls of 2 and 4 steps
