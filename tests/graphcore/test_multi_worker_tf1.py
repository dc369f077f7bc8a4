"""IPUMultiWorkerStrategyV1 in TF1 graphs under ``poprun-lite -np 2``, with the placements and
numbers of Graphcore's ipu_multi_worker_strategy_test (programs/multi_worker_tf1.py): initial
values on the host, sync-on-read variables on the IPU, ``x.values[0]`` of a distributed dataset,
batch normalisation's moving statistics, and a pipeline trained over the workers."""
import json
from pathlib import Path

import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
PROGRAM = Path(__file__).parent / "programs" / "multi_worker_tf1.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("mw")
    result = poprun("-np", "2", str(PROGRAM), str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"multi-worker-tf1-{i}.json").read_text()) for i in range(2)]


def test_placement_and_sync_on_read_variables(runs):
    for task, got in enumerate(runs):
        worker = f"/job:worker/replica:0/task:{task}/device:"
        placement = got["placement"]
        # initial values made (and broadcast) on the host, in Graphcore's colocation group
        assert placement["initial_value_groups"] == ["loc:@cpu"]
        assert placement["initial_value_device"] == worker + "CPU:0"
        # a host variable is read on the IPU (its caching device)
        assert placement["mirrored_read"] == worker + "IPU:0"
        # sync-on-read stays on the IPU with variables_on_host; its initial value on the host
        assert placement["on_read_class"] == "IPUSyncOnReadVariable"
        assert placement["on_read_device"] == worker + "IPU:0"
        assert placement["on_read_initial_value_device"] == worker + "CPU:0"
        # instance 0's value everywhere; then mean(1 + 1, 1 + 2)
        assert placement["on_read_before"] == 1.0
        assert placement["on_read_after"] == 2.5


def test_distributed_dataset_element_reads_as_values(runs):
    for got in runs:
        # each global batch of 4 split between the workers, its squares summed over them
        assert got["dataset_sums"] == [sum(v * v for v in range(b * 4, b * 4 + 4))
                                       for b in range(3)]


def test_batch_normalization_in_a_compiled_function(runs):
    for task, got in enumerate(runs):
        batch_norm = got["batch_norm"]
        assert batch_norm["moving_mean_class"] == "IPUSyncOnReadVariable"
        assert batch_norm["local_mean"] == [task + 1.0]  # mean(2 (task + 1), 0)
        assert batch_norm["mean"] == [1.5]  # mean(1, 2)
        assert batch_norm["variance"] == [2.5]  # mean(var(2, 0), var(4, 0)) = mean(1, 4)


def test_pipeline_over_the_workers(runs):
    gac, repeat, lr, y, xs = 4, 2, 0.5, 1.0, [1.0, 2.0]
    w0, w1, want = 1.0, 2.0, []
    for _ in range(2):
        for _ in range(repeat):
            g0 = sum(2 * (w0 * x + w1 - y) * x for x in xs)
            g1 = sum(2 * (w0 * x + w1 - y) for x in xs)
            w0, w1 = w0 - lr * gac * g0, w1 - lr * gac * g1
        want.append([w0, w1])
    for got in runs:
        assert got["pipeline_global_variables"] == ["w0:0", "w1:0"]  # no accumulators
        assert got["pipeline_weights"] == want
        # one reduction per gradient (of an IPU variable) per weight update
        assert got["pipeline_reductions"] == 2 * repeat
