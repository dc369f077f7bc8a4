"""IPUEstimator under the launcher: the same weights as one process on the same global batch,
whatever the instances, replicas and iterations per loop; chief-only writing; batch sizes and
loops that do not divide. The global step across train() calls and jobs (resume, every call's
count) is in test_estimator_steps.py."""
import json

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow


def run(tmp_path, name, *args, np_=2, replicas=None, strategy="popdist", model_dir=None):
    out = tmp_path / name
    out.mkdir()
    model_dir = model_dir or (tmp_path / f"{name}-model")
    opts = ["-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
    result = poprun(*opts, "tests/workers/estimator_checks.py", strategy, str(model_dir), str(out),
                    *args, timeout=600)
    return result, [json.loads((out / f"estimator-{i}.json").read_text()) for i in range(np_)] \
        if result.returncode == 0 else None


# Runs that share one launch (-np 2, the same replicas): one process per instance runs them one
# after the other, each with a strategy, an estimator, a model_dir and an output folder of its
# own. IPUMultiWorkerStrategy shares its process with no other strategy (it makes the process a
# worker of TensorFlow's cluster, which the other strategies' sessions would run in). A run is
# (strategy, replicas, the program's options, model_dir "none" or None for a folder of its own);
# a run listed nowhere here is a launch of its own.
SHARED_LAUNCHES = [
    [("multi-worker", None, ("--host-call",), None),
     ("multi-worker", None, ("--train-and-evaluate",), None),
     ("multi-worker", None, ("--eval-metrics", "--input-context"), None)],
    [("popdist", None, ("--iterations-per-loop", "2"), None),
     ("popdist", None, ("--train-and-evaluate",), None),
     ("popdist", None, (), "none"),
     ("popdist", None, ("--eval-metrics", "--input-context"), None)],
    [("popdist", 4, ("--host-call",), None),
     ("horovod", 4, (), None)],
]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A function from a run to its instances' records and its model_dir: the run's launch starts
    when one of its runs is first asked for, and only once."""
    started = {}

    def job(strategy, *options, replicas=None, model_dir=None):
        wanted = (strategy, replicas, options, model_dir)
        launch = next((tuple(runs) for runs in SHARED_LAUNCHES if wanted in runs), (wanted,))
        if launch not in started:
            folder = tmp_path_factory.mktemp(f"{strategy}-{replicas}")
            words = []
            for i, (run_strategy, _, run_options, run_model_dir) in enumerate(launch):
                (folder / f"run{i}").mkdir()
                words += ["+"] if words else []
                words += [run_model_dir or str(folder / f"run{i}-model"), str(folder / f"run{i}"),
                          "--strategy", run_strategy, *run_options]
            opts = ["-np", "2"] + (["--num-replicas", str(replicas)] if replicas else [])
            started[launch] = folder, poprun(*opts, "tests/workers/estimator_checks.py", strategy,
                                             *words, timeout=600)
        folder, result = started[launch]
        i = launch.index(wanted)
        assert result.returncode == 0, f"the launch of {launch} failed:\n{result.stderr[-3000:]}"
        runs = [json.loads((folder / f"run{i}" / f"estimator-{n}.json").read_text())
                for n in range(2)]
        return runs, folder / f"run{i}-model"
    return job


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    result, (ref,) = run(tmp_path_factory.mktemp("ref"), "ref", np_=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ref["global_step"] == 4
    return ref


def assert_same_model(got, ref):
    np.testing.assert_allclose(got["w"] + got["b"], ref["w"] + ref["b"], rtol=1e-6, atol=1e-6)
    assert got["global_step"] == ref["global_step"]


@pytest.mark.parametrize("strategy, replicas, extra", [
    ("popdist", None, ["--iterations-per-loop", "2"]),
    ("horovod", 4, []),
    ("popdist", 4, ["--host-call"]),  # host_call applies the gradients (Graphcore's pattern)
    ("multi-worker", None, ["--host-call"]),
    # TensorFlow's collectives in the estimator's sessions, through each instance's gRPC server
    ("multi-worker", 4, ["--iterations-per-loop", "2"]),
    ("multi-worker", None, ["--graph-mode"]),  # eager off: the estimator starts the server
])
def test_equivalence_with_one_process(jobs, reference, strategy, replicas, extra):
    runs, model_dir = jobs(strategy, *extra, replicas=replicas)
    for got in runs:
        assert_same_model(got, reference)
        assert got["eval"] == pytest.approx(reference["eval"], rel=1e-5)
    assert [r["is_chief"] for r in runs] == [True, False]
    assert runs[0]["eval"] == runs[1]["eval"]  # every instance: metrics of the whole eval set
    # Only the chief wrote: one summary file for training and one for evaluation.
    assert len(list(model_dir.glob("events.out.tfevents.*"))) == 1
    assert len(list((model_dir / "eval").glob("events.out.tfevents.*"))) == 1
    assert runs[0]["latest"] == "model.ckpt-4"


@pytest.mark.parametrize("strategy", ["popdist", "multi-worker"])
def test_train_and_evaluate(jobs, reference, strategy):
    # tf.estimator.train_and_evaluate trains on every instance, then evaluates on every instance.
    runs, _ = jobs(strategy, "--train-and-evaluate")
    for got in runs:
        assert_same_model(got, reference)
        metrics = got["train_and_evaluate"]
        assert metrics["global_step"] == 4
        assert metrics["loss"] == pytest.approx(reference["eval"]["loss"], rel=1e-5)
        assert metrics["mse"] == pytest.approx(reference["eval"]["mse"], rel=1e-5)


def test_model_dir_none_is_one_folder_for_the_job(jobs, reference):
    # tf.estimator would give each instance a temporary folder of its own; evaluate() on the
    # non-chief would then never find the chief's checkpoint.
    runs, _ = jobs("popdist", model_dir="none")
    assert runs[0]["model_dir"] == runs[1]["model_dir"]
    assert "poprun-lite-" in runs[0]["model_dir"]
    for got in runs:
        assert_same_model(got, reference)
        assert got["eval"] == pytest.approx(reference["eval"], rel=1e-5)


@pytest.mark.parametrize("strategy", ["popdist", "multi-worker"])
def test_eval_metrics_on_the_host_and_input_context(jobs, strategy):
    runs, _ = jobs(strategy, "--eval-metrics", "--input-context")
    assert runs[0]["w"] == runs[1]["w"]
    assert runs[0]["eval"] == runs[1]["eval"]
    assert runs[0]["eval"]["count"] == 16.0  # each step's metric saw the whole global batch
    assert runs[0]["predict"] != runs[1]["predict"]  # each instance predicts its own shard


def test_batch_size_not_divisible_names_the_numbers(tmp_path):
    result, _ = run(tmp_path, "job", "--train-batch-size", "30", replicas=4)
    assert result.returncode != 0
    assert "train_batch_size 30 is not divisible by 2 worker(s) x 2 replica(s) = 4" in result.stderr


def test_steps_must_fill_whole_loops(tmp_path):
    result, _ = run(tmp_path, "job", "--iterations-per-loop", "3", np_=1)
    assert result.returncode != 0
    assert "steps=4 is not a multiple of iterations_per_loop=3" in result.stderr
