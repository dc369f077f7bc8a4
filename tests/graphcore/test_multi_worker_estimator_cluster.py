"""IPUEstimator on a 2-worker IPUMultiWorkerStrategyV1 cluster the program builds itself (its own
cluster resolver and servers, no launcher: programs/multi_worker_estimator_cluster.py), with the
numbers of Graphcore's ``_test_ipu_estimator_train_with_host_call``: the input pipelines are the
cluster's workers, the host call applies the summed gradients, ``RunConfig(master=...)`` is the
session's target; ``train_and_evaluate`` only trains there (no evaluator task)."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _free_port, job_environ

pytestmark = pytest.mark.slow
PROGRAM = Path(__file__).parent / "programs" / "multi_worker_estimator_cluster.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster")
    ports = [str(_free_port()), str(_free_port())]
    env = {k: v for k, v in job_environ().items() if k != "TF_CONFIG"}
    workers = [subprocess.Popen([sys.executable, str(PROGRAM), str(task), *ports, str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True) for task in range(2)]
    try:
        results = [w.communicate(timeout=240) for w in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    for worker, (_, stderr) in zip(workers, results):
        assert worker.returncode == 0, stderr[-4000:]
    return [json.loads((out / f"estimator-cluster-{task}.json").read_text()) for task in range(2)]


def test_host_call_training_over_the_program_cluster(runs):
    features = [1.0, 2.0]  # labels equal the features; one example per worker and step
    w, want = 2.0, []
    for _ in range(3):
        w -= 0.5 * sum((w * x - x) * x for x in features)  # the workers' gradients summed
        want.append(w)
    for task, got in enumerate(runs):
        assert got["input_contexts"][:3] == [[2, task]] * 3
        assert got["w"] == want
        assert got["global_step"] == [1, 2, 3]


def test_train_and_evaluate_only_trains_on_the_program_cluster(runs):
    for got in runs:
        result = got["train_and_evaluate"]
        assert result["global_step"] == 4
        assert result["metrics"] is None and not result["evaluated"]
