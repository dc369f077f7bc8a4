"""One process, several replicas (issue 49, cause 4): Graphcore's IPU system replicates a
program over the IPUs IPUConfig selects, and so does this project in one process. The numbers
are those of graphcore/tensorflow's all_gather_test, reduce_scatter_test,
popops_cross_replica_mean_test, replicated_graph_test, replication_all_to_all_test and
ipu_strategy_replicated_test (r2.6/sdk-release-3.4), with NumPy references. One program
(programs/one_process_replication.py) runs every case, each TF1 case in a graph of its own."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def got(tmp_path_factory):
    out = tmp_path_factory.mktemp("replication")
    result = subprocess.run([sys.executable, str(PROGRAMS / "one_process_replication.py"),
                             str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "replication.json").read_text())


# ---- configured before the graph: each replica dequeues its own consecutive element ----------
def test_all_gather_reassembles_the_batches_of_four_replicas(got):
    # all_gather_test.testAllGatherMultipleInputs: replica r reads element r of the infeed
    data = np.arange(4 * 32).reshape([4, 4, 8])
    np.testing.assert_array_equal(got["all_gather_inputs"], np.transpose(data, [1, 0, 2]))


def test_reduce_scatter_then_all_gather_keeps_each_inputs_dtype(got):
    # reduce_scatter_test.testReduceScatterMixedDtypes: sum over replicas, block r to replica r
    case = got["reduce_scatter_mixed_dtypes"]
    expected = np.sum(np.reshape(case["data"], [4, 2, 32]), axis=0).reshape([2, 4, 8])
    np.testing.assert_array_equal(case["values"], expected)
    assert case["dtypes"] == ["int32", "float16"]


def test_cross_replica_mean_over_all_replicas_with_group_size_zero_or_none(got):
    # popops_cross_replica_mean_test: replica_group_size=0 is every replica; halves do not
    # overflow (the mean of four 65504s is 65504)
    rows = np.arange(16).reshape(4, 4)
    means = got["cross_replica_mean_all"]
    np.testing.assert_array_equal(means["zero"], np.tile(rows.mean(axis=0), (4, 1)))
    np.testing.assert_array_equal(means["none"], means["zero"])
    np.testing.assert_array_equal(means["half_max"], np.full([4, 4], 65504.0))


def test_replica_group_size_reduces_over_consecutive_groups(got):
    # Graphcore's documented groups: {0, 1}, {2, 3} for replica_group_size=2 of 4 replicas
    assert got["cross_replica_groups"] == {"sum_2": [1, 1, 5, 5], "mean_2": [0.5, 0.5, 2.5, 2.5],
                                           "sum_all": [6, 6, 6, 6]}


def test_an_infeed_initializer_taken_before_compile_starts_every_replicas_iterator(got):
    assert got["initializer_taken_first"] == [[0, 1], [2, 3], [4, 5]]


# ---- configured after the graph (replicated_graph_test): the program is rebuilt --------------
def test_a_graph_built_before_configure_runs_as_the_replicas_configured(got):
    assert got["sum_of_two_replicas"] == [[4, 4, 4, 4]]  # 2 replicas of x + x, x = 1


def test_the_gradient_of_a_cross_replica_sum_is_the_sum_of_the_replicas_gradients(got):
    case = got["loss_and_gradient"]
    assert case["loss"] == [8, 8, 8, 8] and case["grad"] == [[2, 2, 2, 2]]
    assert case["variables"] == ["b:0"]  # the rebuilt program uses the variable built first


def test_infeed_outfeed_loop_of_two_replicas(got):
    # testCreateSimpleReplicatedInfeedOutfeedDict: replica r reads element r, R + r, ... of
    # 0, 1, 2, 0, 1, ...; v <- sum over replicas of (v + x); the outfeed has a replica axis
    # (taken before configure_ipu_system, it reads the rebuilt program's queues)
    case = got["infeed_outfeed_loop"]
    values = [0, 1, 4, 11, 23, 48]
    assert case["result"] == [[48, 48]]
    assert case["outfeed"]["last"] == [[[v, v]] * 2 for v in values[:-1]]
    assert case["outfeed"]["this"] == [[[v, v]] * 2 for v in values[1:]]


def test_replicas_without_a_collective_each_run_their_loop(got):
    assert got["no_collective"] == [[1, 2], [3, 4]]  # testReplicatedGraphWithoutAllReduce


def test_graphcores_generated_collective_ops_over_eight_replicas(got):
    # replication_all_to_all_test: x + replica index gathered; all-to-all of x + 8 * index;
    # multi-update-add summed over replicas and normalised (the mean of equal replicas)
    case = got["generated_ops"]
    x = np.arange(1, 9)
    assert case["gathered"] == [[(x + r).tolist() for r in range(8)]] * 8
    rows = np.array([x + 8 * r for r in range(8)])
    assert case["swapped"] == rows.T.tolist()
    idx = [1, 2, 3, 4, 1, 2, 3, 4, 0, 5, 6, 7, 1, 1, 1, 7]
    expected = np.zeros([8, 2])
    np.add.at(expected, idx, 2.0)
    assert case["mean"] == [expected.tolist()] * 8
    assert case["shape_outside_a_program"] == [8, 2, 4]  # testAllGatherShapeInference


# ---- training: each replica its own copy of the variables, read back from replica 0 ---------
def expected_weights(cross_replica):
    x = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
    w = [np.array([1.0, -1.0]), np.array([1.0, -1.0])]
    for step in range(3):
        grads = [w[r] * x[2 * step + r] ** 2 for r in range(2)]
        mean = np.mean(grads, axis=0)
        w = [w[r] - 0.1 * (mean if cross_replica else grads[r]) for r in range(2)]
    return w[0]


@pytest.mark.parametrize("configured", ["first", "after"])
def test_cross_replica_optimizer_applies_the_mean_gradient_on_every_replica(got, configured):
    case = got[f"train_cross_replica_{configured}"]
    np.testing.assert_allclose(case["w"], expected_weights(True), rtol=1e-6)
    assert case["global_step"] == 3  # three steps of the program, not three per replica
    assert case["variables"] == ["w:0", "global_step:0"]  # replicas' copies are not variables


@pytest.mark.parametrize("configured", ["first", "after"])
def test_a_plain_optimizer_updates_each_replicas_own_copy(got, configured):
    # no cross-replica reduction: the host reads replica 0's copy, trained on its own data
    case = got[f"train_plain_{configured}"]
    np.testing.assert_allclose(case["w"], expected_weights(False), rtol=1e-6)
    assert case["global_step"] == 3


def test_a_pipeline_replicates_over_the_ipus_its_stages_span(got):
    # 2 stages on 2 IPUs: 1 replica (no replica axis); on 4 IPUs: 2 replicas of 2 IPUs
    assert got["pipeline_on_2_ipus"] == [4, 4]
    assert got["pipeline_on_4_ipus"] == [[4, 5], [4, 5]]


def test_a_factor_the_configured_replicas_cannot_make_fails_when_the_program_runs(got):
    assert "all_gather: replication_factor=4 does not divide" in got["unmet_factor"]


# ---- IPUStrategy: run returns replica 0's value (ipu_strategy_replicated_test) ---------------
def test_ipu_strategy_run_returns_replica_zeros_value(got):
    assert got["strategy"] == {"sum": 1.0, "mean": 0.5, "index": 0, "type": "EagerTensor",
                               "reduced": 1.0}


def test_tf1_batch_normalization_module_normalizes_and_updates_its_moving_mean(got):
    # Graphcore's TF1 tests import tensorflow.python.layers.normalization; TensorFlow loads it
    # from tf-keras, which a TensorFlow 2.15 environment does not have (Keras 2 is keras there)
    data = np.arange(8, dtype=np.float64).reshape(4, 2)
    case = got["tf1_batch_normalization"]
    expected = (data - data.mean(axis=0)) / np.sqrt(data.var(axis=0) + 1e-3)
    np.testing.assert_allclose(case["normalized"], expected, rtol=1e-5)
    np.testing.assert_allclose(case["moving_mean"], 0.5 * data.mean(axis=0), rtol=1e-6)
