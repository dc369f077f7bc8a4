"""Conformance with Graphcore's own tests (graphcore/tensorflow tensorflow/python/ipu/tests/,
graphcore/keras keras/ipu/extensions/): the same behaviours, checked on our CPU meanings with
exact numbers. Programs in programs/ import the IPU API unedited
(``from tensorflow.python import ipu``, ``import popdist``) and run as real processes, one
process per run or under ``poprun-lite -np 2``; each writes its results as JSON, which the
tests here compare with NumPy references."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).parent / "programs"


def run_program(name, out_dir, *args, np_=None, replicas=None, timeout=600):
    import subprocess
    if np_ is None:
        result = subprocess.run([sys.executable, str(PROGRAMS / name), str(out_dir), *args],
                                capture_output=True, text=True, timeout=timeout)
    else:
        opts = ["-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
        result = poprun(*opts, str(PROGRAMS / name), str(out_dir), *args, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def tf1(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1")
    run_program("tf1_feeds_loops.py", out)
    return json.loads((out / "tf1.json").read_text())


@pytest.fixture(scope="module")
def tf2(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf2")
    run_program("tf2_keras.py", out)
    return json.loads((out / "tf2-0.json").read_text())


# ---- NumPy references --------------------------------------------------------------------
rng = np.random.default_rng(0)
X48, Y48 = rng.normal(size=(48, 3)), rng.normal(size=(48, 1))
rng = np.random.default_rng(0)
X32, Y32 = rng.normal(size=(32, 3)), rng.normal(size=(32, 1))
W32 = rng.normal(size=(3, 1))
rng = np.random.default_rng(0)
X64, Y64, W64 = rng.normal(size=(64, 3)), rng.normal(size=(64, 1)), rng.normal(size=(3, 1))
X32 = X32.astype(np.float32).astype(np.float64)
W1, W2 = np.eye(3) * 0.5, np.ones((3, 1))


def linear_grad(x, y, w):
    """Gradient of mean((x @ w - y)^2) and the loss."""
    e = x @ w - y
    return 2 * x.T @ e / len(x), float((e ** 2).mean())


def train_linear(X, Y, w, batch, micro, updates, lr, momentum=0.0, method="sum", keras=True,
                 epochs=1):
    """SGD with gradient accumulation: ``micro`` batches per update. keras: v = m v - lr g,
    w += v; TF1 momentum: v = m v + g, w -= lr v."""
    w, v, losses = w.copy(), np.zeros_like(w), []
    for _ in range(epochs):
        for u in range(updates):
            g = np.zeros_like(w)
            for j in range(micro):
                b = u * micro + j
                grad, loss = linear_grad(X[b * batch:(b + 1) * batch],
                                         Y[b * batch:(b + 1) * batch], w)
                g += grad
                losses.append(loss)
            if method != "sum":
                g /= micro
            if keras:
                v = momentum * v - lr * g
                w = w + v
            else:
                v = momentum * v + g
                w = w - lr * v
    return w, losses


def pipeline_reference(count, repeat, method="sum", batch=2, lr=0.1, X=X48, Y=Y48):
    w1, w2, losses, hsums = W1.copy(), W2.copy(), [], []
    for r in range(repeat):
        g1, g2 = np.zeros_like(w1), np.zeros_like(w2)
        for j in range(count):
            b = r * count + j
            x, y = X[b * batch:(b + 1) * batch], Y[b * batch:(b + 1) * batch]
            h = x @ w1
            e = h @ w2 - y
            losses.append(float((e ** 2).mean()))
            hsums.append(float(h.sum()))
            de = 2 * e / len(x)
            g2 += h.T @ de
            g1 += x.T @ (de @ w2.T)
        scale = 1.0 / count if method == "mean" else 1.0
        w1, w2 = w1 - lr * scale * g1, w2 - lr * scale * g2
    return w1, w2, losses, hsums


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=tol, atol=tol)


# ---- infeed_outfeed_test.py ------------------------------------------------------------------
def test_infeed_repeat_non_tuple(tf1):
    # testSingleInfeedRepeatNonTuple: 20 iterations of v += x over 0..9 twice, from v = 1: 91;
    # compile returns a one-element list; a second run continues the dataset (MultipleRuns).
    got = tf1["repeat_non_tuple"]
    assert (got["type"], got["len"]) == ("list", 1)
    assert got["first"] == [[91.0] * 4] * 4 and got["second"] == [[91.0] * 4] * 4


def test_infeed_tuple_and_named_elements(tf1):
    # testSingleInfeedRepeatTuple (31), testSingleInfeedRepeatNamed (dict -> keyword arguments,
    # parameters swapped: 4 and 27), testInfeedUsingDatasetWithNestedDictNotUnpacked.
    assert tf1["repeat_tuple"] == [[31.0] * 4] * 4
    assert tf1["number_of_tuple_elements"] == 2
    assert tf1["repeat_named"] == [4.0, 27.0]
    assert tf1["nested_dict_not_unpacked"] == 0.0 + 1.0 + 2.0


def test_infeed_multiple_repeats_in_program_order(tf1):
    # testSingleInfeedMultipleRepeats: two chained loops on one infeed: 5.
    assert tf1["multiple_repeats"] == [[5.0] * 4] * 4
    # Two independent loops dequeue in program order: elements 0,1,0 then 1.
    assert tf1["repeats_in_program_order"] == [[10.0] * 4, [1.0] * 4]


def test_infeed_while_loop(tf1):
    # testSingleInfeedWhileLoopTuple: the condition sees the loop values only.
    assert tf1["while_loop"] == [6.0, 0 + 1 + 2 + 3 + 4 + 5]


def test_infeed_errors(tf1):
    # testUndefinedShape, testMultipleInitializations.
    assert (tf1["undefined_shape"][0] == "ValueError"
            and "drop_remainder=True" in tf1["undefined_shape"][1])
    assert tf1["initializer_twice"][0] == "ValueError"


def test_infeed_restart(tf1):
    # testInfeedRestart: deleter then initializer starts the dataset again.
    assert tf1["infeed_restart"] == [10.0, 10.0]


def test_outfeed_all_last_dict_and_delayed_reads(tf1):
    # testSingleOutfeedRepeatNonTuple, testTwoOutfeedsDifferentProgramsDelayedOutfeedRead,
    # testSingleInfeedOutfeedRepeatTupleLast, testSingleInfeedOutfeedRepeatNamed,
    # testOutfeedNonTensorOutputs, testInfeedOutfeedContinuousDequeuing.
    sums = np.cumsum([0, 1, 2, 3]), np.cumsum([4, 5, 6, 7])
    expected = [[float(s)] * 2 for s in list(sums[0]) + list(sums[1])]
    assert tf1["outfeed_all"] == expected
    assert tf1["outfeed_last"] == [[22.0, 22.0], [44.0, 44.0]]
    assert tf1["outfeed_dict"] == {"sum": [2 * e[0] for e in expected], "step": [7] * 8}
    assert tf1["outfeed_empty_shape"] == [0, 2]
    assert tf1["outfeed_continuous"] == [[float(s)] * 2 for s in np.cumsum([8, 9, 10, 11])]
    assert tf1["dequeue_before_enqueue"][0] == "ValueError"


def test_outfeed_in_tf_function_scoped_and_iteration(tf2):
    # testScopedOuteed, IPUOutfeedIteratorTest.testCreation (LAST cannot be iterated).
    assert tf2["scoped_outfeed"] == [[i, i] for i in range(1, 11)]
    assert tf2["iterate_last_error"][0] == "RuntimeError"


# ---- loops / utils_test_v2.py / ipu_compiler_test.py ---------------------------------------------
def test_loop_signature_and_type_errors(tf1):
    assert tf1["body_arity"][0] == "TypeError" and "cannot be called" in tf1["body_arity"][1]
    assert tf1["body_types"][0] == "TypeError" and "Mismatch" in tf1["body_types"][1]


def test_compile(tf1):
    # testCompileWrongUseOfEstimatorSpec; outputs as Graphcore returns them.
    assert (tf1["compile_estimator_spec"][0] == "ValueError"
            and "EstimatorSpec" in tf1["compile_estimator_spec"][1])
    assert tf1["compile_op_only"] == "Operation" and tf1["compile_multi"] == 2


def test_training_loop_with_infeed_and_outfeed(tf2):
    # testTrainingLoopWithInfeedAndOutfeedGetAll / GetLast, in TF2 under IPUStrategy.
    w, losses = train_linear(X32, Y32, W32, 4, 1, 8, 0.05)
    close(tf2["loop_losses"], losses)
    close(tf2["loop_last"], losses[-1])
    close(tf2["loop_w"], w.ravel())


# ---- gradient_accumulation_test.py -------------------------------------------------------------
@pytest.mark.parametrize("method", ["sum", "mean", "running_mean"])
def test_gradient_accumulation_optimizer_matches_cpu(tf1, method):
    # testCompare* (_compare_to_cpu): GradientAccumulationOptimizerV2 over 4 mini-batches,
    # momentum 0.9, 3 updates, equals plain SGD on the accumulated gradients.
    w, losses = train_linear(X48, Y48, W2, 2, 4, 3, 0.1, momentum=0.9,
                             method="sum" if method == "sum" else "mean", keras=False)
    got = tf1["ga"][method]
    close(got["w"], w.ravel())
    close(got["losses"], losses)
    assert got["global_step"] == 3


def test_gradient_accumulation_invalid(tf1):
    # testGAReduceMethodInvalid.
    assert (tf1["ga_invalid_method"][0] == "ValueError"
            and "SUM, MEAN, RUNNING_MEAN" in tf1["ga_invalid_method"][1])
    assert tf1["ga_invalid_count"][0] == "ValueError"


# ---- pipelining_test.py --------------------------------------------------------------------
@pytest.mark.parametrize("method", ["sum", "mean"])
def test_pipeline_training_matches_cpu(tf1, method):
    # testPipelineCompare*, testOutfeedLoss, testPipelineGAReduceMethodSupported.
    w1, w2, losses, _ = pipeline_reference(4, 2, method)
    got = tf1["pipeline"][method]
    close(got["w1"], w1.ravel())
    close(got["w2"], w2.ravel())
    close(got["outfeed"], losses)


def test_pipeline_on_a_named_ipu_device(tf1):
    # tf.device("/device:IPU:0") around ipu_compiler.compile, initializers moved to the CPU:
    # the IPU device is the local device (as ipu_scope), the same numbers.
    w1, w2, losses, _ = pipeline_reference(4, 2)
    got = tf1["pipeline"]["named_device"]
    close(got["w1"], w1.ravel())
    close(got["w2"], w2.ravel())
    close(got["outfeed"], losses)


def test_pipeline_outfeed_accumulated_and_masked(tf1):
    # testOutfeedLossAccumulated, testOutfeedMask.
    _, _, losses, _ = pipeline_reference(3, 2)
    close(tf1["pipeline"]["accumulated"]["outfeed"], [sum(losses[:3]), sum(losses[3:])])
    _, _, losses, _ = pipeline_reference(2, 1)
    close(tf1["pipeline"]["mask"]["outfeed"], [losses])


def test_pipeline_inference_and_errors(tf1):
    # testPipelineNoOutfeedInference (one stage, dict outputs), testPipelineOnlyOneStage,
    # outputs without an outfeed, testPipelineGAReduceMethodInvalid.
    assert tf1["pipeline_inference_dict"] == [6, 4, 1]
    assert tf1["pipeline_needs_outfeed"][0] == "ValueError"
    assert tf1["pipeline_bad_method"][0] == "ValueError"


def test_pipeline_tf2_keras_optimizer(tf2):
    # A TF2 pipeline with a Keras optimizer and variables (testNoTapeWithVariables).
    _, w2, losses, _ = pipeline_reference(4, 2, "mean", batch=4, X=X32, Y=Y32)
    close(tf2["pipeline_tf2_losses"], losses)
    close(tf2["pipeline_tf2_w2"], w2.ravel())


# ---- ipu_session_run_hooks_test.py ---------------------------------------------------------
def test_logging_tensor_hook(tf1):
    # test_illegal_args, test_missing_log_call, test_log_twice_not_supported,
    # test_print_every_n_iter (LAST), test_print_all_at_end (ALL), test_print_at_end_only.
    assert tf1["hook_illegal_args"][0] == "ValueError"
    assert tf1["hook_both_args"][0] == "ValueError"
    assert tf1["hook_missing_log"][0] == "RuntimeError"
    assert tf1["hook_log_twice"][0] == "RuntimeError"
    messages = tf1["hook_messages"]
    assert messages[0] == "count = 1.0"
    assert messages[1].startswith("count = 3.0 (") and messages[2].startswith("count = 3.0")
    assert messages[3] == "doubled = [2. 4. 6.]"


# ---- utils ---------------------------------------------------------------------------------
def test_utils_seed_and_initializers(tf1):
    assert tf1["seed_draws"][0] == tf1["seed_draws"][1]
    assert tf1["init_on_cpu"] == ["/device:CPU:0"]


# ---- ipu_strategy_test.py and Keras (keras/ipu/extensions tests) -----------------------------
def test_ipu_strategy_basics(tf2):
    # test_create_variable; one replica in sync, as Graphcore's; config enums and options.
    assert tf2["num_replicas_in_sync"] == 1 and tf2["alias"]
    assert tf2["variable_device"] == "/job:localhost/replica:0/task:0/device:IPU:0"
    assert tf2["config_error"][0] == "TypeError"
    assert tf2["cross_replica_sum_one_replica"] == 3.0
    close(tf2["gelu"], [-0.158808, 0.345714, 1.954598])


def test_op_modules(tf2):
    # Module paths of the flat op aliases; embedding_ops_test / math_ops (serialized_matmul_test:
    # the product of the unserialized matmul), image_ops_test.testNormaliseImage (normalised
    # channels, a fourth channel of zeros; uint8 gives float16; 2 channels refused).
    assert tf2["flat_modules"] == [True, True]
    assert tf2["embedding_lookup"] == [[[9.0, 10.0, 11.0], [0.0, 1.0, 2.0]],
                                       [[3.0, 4.0, 5.0], [3.0, 4.0, 5.0]]]
    assert tf2["embedding_bad_factor"][0] == "ValueError"
    close(tf2["serialized_matmul"], (X32[:4] @ W32).ravel())
    assert tf2["serialized_matmul_bad_dim"][0] == "ValueError"
    assert tf2["segment_sum"] == [3.0, 3.0, 4.0]
    expected = np.stack([np.full([2, 2, 3], float(i)) for i in range(3)])
    expected = (expected * 2 - np.array([1, 2, 3])) * np.array([4, 5, 6])
    expected = np.concatenate([expected, np.zeros([3, 2, 2, 1])], axis=-1)
    close(tf2["normalise_image"], expected)
    assert tf2["normalise_image_uint8_dtype"] == "float16"
    assert tf2["normalise_image_two_channels"][1] == "The image has 2 channels, expected 3."


def test_dataset_benchmark(tf2):
    # dataset_benchmark_test.testWithDataset: one JSON object per epoch, every field above 0;
    # a dataset repeated to fill every epoch; elements of 4x4 float32 (64 bytes).
    epochs = tf2["dataset_benchmark"]["epochs"]
    assert len(epochs) == 3
    for epoch in epochs:
        assert set(epoch) == {"elements_processed", "total_bytes_processed", "time_elapsed",
                              "elements_per_second", "bandwidth"}
        assert epoch["elements_processed"] == 100 and epoch["total_bytes_processed"] == 6400
        assert all(value > 0 for value in epoch.values())
    assert tf2["dataset_benchmark_no_epochs"][0] == "ValueError"


def test_keras_fit_evaluate_predict_under_ipu_strategy(tf2):
    # test_keras_mnist_model_compile_fit: IPUStrategy trains exactly as Keras without a strategy;
    # Sequential and functional models alike.
    for key in ("fit", "fit_functional"):
        assert tf2[key] == tf2["fit_plain_keras"], key
    w, losses = train_linear(X32, Y32, W32, 4, 1, 8, 0.05, momentum=0.9, epochs=2)
    close(tf2["fit"]["w"], w.ravel())
    assert tf2["fit"]["iterations"] == 16
    pred = X32[:8] @ w
    close(tf2["fit"]["predict"], pred.ravel())
    close(tf2["fit"]["evaluate"][0], float(((X32 @ w - Y32) ** 2).mean()))


@pytest.mark.parametrize("key, micro, method", [("ga_sum", 4, "sum"), ("ga_mean", 4, "mean"),
                                                ("ga_running_mean", 2, "mean"),
                                                ("pipelined_sequential", 4, "sum"),
                                                ("pipelined_functional_mean", 4, "mean")])
def test_keras_gradient_accumulation_and_pipelining(tf2, key, micro, method):
    # set_gradient_accumulation_options / set_pipelining_options: one update per `micro`
    # micro-batches, summed (default) or averaged; pipelined models give the same numbers.
    w, _ = train_linear(X32, Y32, W32, 4, micro, 8 // micro, 0.05, momentum=0.9, method=method,
                        epochs=2)
    close(tf2[key]["w"], w.ravel())
    assert tf2[key]["iterations"] == 2 * 8 // micro


def test_keras_extension_errors(tf2):
    assert tf2["ga_steps_per_execution"][0] == "RuntimeError"
    assert tf2["ga_epoch_steps"][0] == "ValueError"
    for key in ("ga_zero", "ga_kwargs_opt", "pipelining_kwargs_count", "infeed_dataset_kwarg",
                "outfeed_mode_kwarg", "pipelined_without_ga"):
        assert tf2[key][0] == "ValueError", key


def test_ipu_strategy_programs_run_as_independent_instances(tmp_path, tf2):
    # Under poprun-lite each instance runs an IPUStrategy program on its own: both instances
    # compute exactly what one process computes.
    run_program("tf2_keras.py", tmp_path, "quick", np_=2)
    for i in range(2):
        got = json.loads((tmp_path / f"tf2-{i}.json").read_text())
        assert got["instance"] == i
        for key in ("fit", "ga_sum", "pipelined_sequential"):
            assert got[key] == tf2[key], (i, key)


# ---- distributed (popdist_strategy_test.py, ipu_multi_worker_strategy_test.py) ---------------
def test_distributed_cross_replica_ops_and_accumulation(tmp_path):
    # test_all_reduce (cross_replica_sum/mean over every replica of every instance); Keras
    # gradient accumulation under PopDistStrategy and a TF1 loop with
    # CrossReplicaGradientAccumulationOptimizerV2, each instance on its own shard, end with the
    # weights of one process on the global batch; IPUStrategy replicated over each instance's
    # local IPUs.
    run_program("distributed.py", tmp_path, np_=2, replicas=4)
    results = [json.loads((tmp_path / f"dist-{i}.json").read_text()) for i in range(2)]
    keras_w, _ = train_linear(X64, Y64, W64, 8, 4, 2, 0.05, momentum=0.9, method="mean", epochs=2)
    tf1_w, _ = train_linear(X64, Y64, W64, 8, 4, 2, 0.05, method="sum", keras=False)
    for got in results:
        assert got["replicas"] == 4
        assert got["cross_replica_sum"] == [10.0, 10.0]
        assert got["cross_replica_mean"] == [2.5, 2.5]
        close(got["keras_ga_w"], keras_w.ravel())
        assert got["keras_ga_iterations"] == 4
        close(got["tf1_ga_w"], tf1_w.ravel())
    # A replicated IPUStrategy (2 local IPUs per instance): each replica reads its own batches
    # of 4, gradients are summed (model_replication_test, gradient_accumulation_test with
    # replication): one device with a batch of 8 and twice the learning rate, 8 updates per
    # epoch; steps per epoch divided by the replicas; predict in the input's order.
    rep_w, rep_losses = train_linear(X64, Y64, W64, 4, 2, 8, 0.05, momentum=0.9, epochs=2)
    one_device_w, _ = train_linear(X64, Y64, W64, 8, 1, 8, 0.1, momentum=0.9, epochs=2)
    close(rep_w, one_device_w)
    ga_w, _ = train_linear(X64, Y64, W64, 4, 4, 4, 0.1, momentum=0.9, method="mean", epochs=2)
    for got in results:
        assert got["ipu_num_replicas_in_sync"] == 1  # as Graphcore's IPUStrategy
        fit = got["ipu_fit"]
        close(fit["w"], rep_w.ravel())
        close(got["ipu_fit_arrays_w"], rep_w.ravel())
        assert fit["iterations"] == 16
        close(fit["loss"][0], np.mean(rep_losses[:16]))
        close(fit["evaluate"], float(((X64 @ rep_w - Y64) ** 2).mean()))
        close(fit["predict"], (X64[:8] @ rep_w).ravel())
        close(got["ipu_ga"]["w"], ga_w.ravel())
        assert got["ipu_ga"]["iterations"] == 8
        assert "--ipus-per-replica 2" in got["ipu_pipelined_over_replicas"]
        # ipu_outfeed_queue docs: ALL gives [enqueues, replicas, ...], LAST [replicas, ...];
        # run returns replica 0's cross-replica sum (1 + 2), as Graphcore's IPUStrategy
        assert got["ipu_cross_replica_sum"] == [3.0]
        assert got["outfeed_all"] == [[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]]
        assert got["outfeed_all_row_shape"] == [3, 2, 2]
        assert got["outfeed_last"] == [2.0, 3.0]
    assert results[0]["keras_ga_w"] == results[1]["keras_ga_w"]
    assert results[0]["tf1_ga_w"] == results[1]["tf1_ga_w"]


@pytest.mark.parametrize("config,replicas", [
    ("global", 2), ("global", 4), ("local", 2), ("local", 4), ("unconfigured", 2),
    ("unconfigured", 4), ("ops-first", 4)])
def test_popdist_strategy_replica_all_reduce_spans_the_configured_replicas(tmp_path, config,
                                                                           replicas):
    # popdist_strategy_test.test_strategy's replica_context.all_reduce, at 1 and 2 replicas per
    # instance. It spans the replicas of the IPU system in effect, as Graphcore's GCL reduction:
    # all R replicas of the job when set_ipu_config came before configure_ipu_system (or no IPU
    # system was configured), the instance's L replicas when configure_ipu_system came first and
    # update_ipu_config after (test_strategy's order: with one replica, an identity). SUM and
    # MEAN of a tensor every local replica passes as the same object (2.0: once per replica), of
    # its own value (replica r + 1), in a nest (int32 replica ids: MEAN floors), through
    # merge_call, eagerly and in functions; strategy.reduce on the host then sums all R replicas'
    # results; ipu.cross_replica_ops and replication_index count the same replicas. With
    # add_ipu_cross_replica_reductions off each replica keeps its own value there.
    # ops-first: the global order after the program read a dataset (TensorFlow ran before the IPU
    # system existed, as in Graphcore's CNN programs): each instance still has its 2 replicas.
    run_program("popdist_all_reduce.py", tmp_path, config, np_=2, replicas=replicas)
    R, local = replicas, replicas // 2
    for i in range(2):
        mine = range(i * local, (i + 1) * local)  # this instance's global replica ids
        reach = mine if config == "local" else range(R)
        K, values, ids = len(reach), sum(r + 1 for r in reach), sum(reach)
        want = {
            "SUM": {"same": 2.0 * K, "per_replica": values, "nest": [2.0 * K, {"id": ids}],
                    "merge_call": values},
            "MEAN": {"same": 2.0, "per_replica": values / K, "nest": [2.0, {"id": ids // K}],
                     "merge_call": values / K},
        }
        # ipu.cross_replica_ops.cross_replica_sum and replication_index count the same replicas
        index = [r - mine[0] if config == "local" else r for r in mine]
        got = json.loads((tmp_path / f"all-reduce-{i}.json").read_text())
        assert (got["instance"], got["replicas"]) == (i, R)
        for op, results in want.items():
            for mode in ("eager", "replica_function", "function"):
                assert got[f"{op}/{mode}"] == [
                    {**results, "cross_replica_sum": values, "replication_index": k}
                    for k in index], (op, mode, i)
                assert got[f"{op}/{mode}/reduce_sum"] == R * results["same"], (op, mode, i)
        # (strategy.reduce in merge_call returns one value: the instance's first replica's)
        own = [{"same": 2.0, "per_replica": r + 1, "nest": [2.0, {"id": r}],
                "merge_call": mine[0] + 1, "cross_replica_sum": r + 1, "replication_index": k}
               for r, k in zip(mine, index)]
        assert got["SUM/no_ipu_reductions"] == own, i
        # IPUIterator: at step k, local replica r of instance j reads j + 2 (k L + r)
        assert got["iterator"] == [sum((j + 2 * (k * local + r)) ** 2 for j in range(2)
                                       for r in range(local)) for k in range(3)], i
        assert got["SUM/no_ipu_reductions/reduce_sum"] == 2.0 * R, i


def test_tutorial_style_pipelined_keras_program(tmp_path):
    # keras models_comparison_test.test_sequential_and_pipeline and the layout of Graphcore's TF2
    # tutorials (dataset built before configure_ipu_system, `from tensorflow.keras import ipu`,
    # a Sequential built on first use, set_pipeline_stage_assignment): a pipelined model gives
    # the numbers of gradient descent on 4 accumulated micro-batches.
    run_program("tf2_tutorial_style.py", tmp_path)
    got = json.loads((tmp_path / "tutorial.json").read_text())
    w1, w2, _, _ = pipeline_reference(4, 2, "sum", batch=4, lr=0.1, X=X32, Y=Y32)
    close(got["w1"], w1.ravel())
    close(got["w2"], w2.ravel())
    assert got["assignment"] == [0, 1] and got["iterations"] == 2
    assert got["stage_class"] == "PipelineStage"
