"""Host embeddings (``ipu.embedding_ops.create_host_embedding``) against NumPy: lookups, the
optimizer specs' host updates (SGD, SGD+GA), every local replica updating its instance's one
table, instances keeping their own tables, as one process and under ``poprun-lite -np 2``; and the
SDK's internal modules (``tensorflow.compiler.plugin.poplar``) that programs import."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAMS = Path(__file__).parent / "programs"
ROWS, WIDTH, LR, LR_W, ACCUMULATION = 10, 3, 0.05, 0.02, 3
IDS = np.array([[1, 2], [2, 9], [0, 1], [3, 12], [4, 4], [9, 5], [6, 7], [1, 8]] * 2, np.int32)
INIT = (np.arange(ROWS * WIDTH, dtype=np.float64).reshape(ROWS, WIDTH) % 7) / 10


def reference(shards, local_replicas, steps, frozen_weight=0.0):
    """Tables per instance (of its shard of ids), the dense weight and the replicas' losses per
    step. Each replica
    looks up 2 ids in ``sgd + 2 * ga (+ frozen)``, loss = sum((rows @ w)^2) / 2; every local
    replica's ``-LR * gradient`` goes to its instance's tables after the step's lookups (the GA
    table's every ACCUMULATION steps); w's gradients are summed over every replica."""
    instances = len(shards)
    sgd = [INIT.copy() for _ in range(instances)]
    ga = [INIT.copy() for _ in range(instances)]
    pending = [np.zeros_like(INIT) for _ in range(instances)]
    w, losses = np.ones((WIDTH, 1)), []
    for step in range(steps):
        w_grad, step_losses = 0.0, []
        sgd_updates = [np.zeros_like(INIT) for _ in range(instances)]
        ga_updates = [np.zeros_like(INIT) for _ in range(instances)]
        for i in range(instances):
            shard = shards[i]
            for r in range(local_replicas):
                ids = np.clip(shard[step * local_replicas + r], 0, ROWS - 1)
                rows = sgd[i][ids] + 2 * ga[i][ids] + frozen_weight * INIT[ids]
                h = rows @ w
                step_losses.append(float((h * h).sum() / 2))
                rows_grad = h @ w.T
                w_grad = w_grad + rows.T @ h
                np.add.at(sgd_updates[i], ids, -LR * rows_grad)
                np.add.at(ga_updates[i], ids, -LR * 2 * rows_grad)
        for i in range(instances):
            sgd[i] += sgd_updates[i]
            pending[i] += ga_updates[i]
            if (step + 1) % ACCUMULATION == 0:
                ga[i] += pending[i]
                pending[i][:] = 0
        w -= LR_W * w_grad
        losses.append(step_losses)
    return sgd, ga, w, np.array(losses)


def run(program, out, instances=None, *options):
    """The program as one process (TF1 programs with POPDIST_TF1=1, as ``--tf1`` runs them) or
    under ``poprun-lite -np instances options``."""
    if instances is None:
        env = dict(os.environ, POPDIST_TF1="1" if "--tf1" in options else "0")
        result = subprocess.run([sys.executable, str(PROGRAMS / program), str(out)], env=env,
                                capture_output=True, text=True, timeout=300)
    else:
        result = poprun("-np", str(instances), *options, str(PROGRAMS / program), str(out),
                        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def load(out, prefix, instances):
    return [json.loads((out / f"{prefix}_{i}.json").read_text()) for i in range(instances)]


@pytest.fixture(scope="module", params=[1, 2], ids=["one_process", "two_instances"])
def tf1_runs(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("he_tf1")
    if request.param == 1:
        run("host_embedding_tf1.py", out, None, "--tf1")
    else:
        run("host_embedding_tf1.py", out, 2, "--tf1")
    return load(out, "host_embedding", request.param)


@pytest.fixture(scope="module", params=[(1, 2), (2, 4)], ids=["one_process", "two_instances"])
def tf2_runs(request, tmp_path_factory):
    instances, replicas = request.param
    out = tmp_path_factory.mktemp("he_tf2")
    if instances == 1:
        run("host_embedding_tf2.py", out)
    else:
        run("host_embedding_tf2.py", out, 2, "--num-replicas", str(replicas))
    return load(out, "host_embedding_tf2", instances), replicas // instances


@pytest.mark.slow
def test_tf1_session_program_updates_its_tables_on_the_host_as_numpy(tf1_runs):
    instances = len(tf1_runs)
    for got in tf1_runs:  # no collective: each instance trains as one process on its shard
        steps = len(IDS) // instances
        (sgd,), (ga,), w, losses = reference([IDS[got["instance"]::instances]], 1, steps,
                                             frozen_weight=1.0)
        assert got["instances"] == instances and got["steps"] == steps
        np.testing.assert_allclose(got["sgd"], sgd, atol=1e-6)
        np.testing.assert_allclose(got["ga"], ga, atol=1e-6)
        np.testing.assert_array_equal(got["frozen"], INIT.astype(np.float32))  # not trainable
        np.testing.assert_allclose(got["w"], w.ravel(), atol=1e-6)
        np.testing.assert_allclose(got["loss"], losses[-1][0], rtol=1e-5)
        assert got["trace"] == [] and got["compile_begin"] == 0
        assert got["variables"] == ["frozen_table", "ga_table", "ga_table/__dummy",
                                    "ga_table_accumulated_batches", "ga_table_pending_updates",
                                    "sgd_table", "sgd_table/__dummy", "w"]
        assert got["register_without_session"] == [
            "ValueError", "HostEmbedding.register requires a session when eager execution is "
            "disabled."]
        assert got["call"][0] == "NotImplementedError"
        assert got["popnn_op"] == [
            "NotImplementedError", "tensorflow.compiler.plugin.poplar.ops.gen_popnn_ops."
            "popnn_gru_layer is an IPU-only part of Graphcore's SDK with no meaning on a CPU; use "
            "the ipu.* or TensorFlow API that does the same instead."]
    if instances == 2:  # each instance is its own host: its table learnt from its shard only
        assert not np.allclose(tf1_runs[0]["sgd"], tf1_runs[1]["sgd"])


@pytest.mark.slow
def test_tf2_replicas_update_their_instance_table_once_per_step(tf2_runs):
    runs, local_replicas = tf2_runs
    shards = [IDS[i::len(runs)] for i in range(len(runs))]
    sgd, ga, w, losses = reference(shards, local_replicas, 4)
    for got in runs:
        i = got["instance"]
        np.testing.assert_allclose(got["sgd"], sgd[i], atol=1e-6)
        np.testing.assert_allclose(got["ga"], ga[i], atol=1e-6)
        np.testing.assert_allclose(got["w"], w.ravel(), atol=1e-6)  # summed over all replicas
        np.testing.assert_allclose(got["losses"],
                                   losses[:, i * local_replicas:(i + 1) * local_replicas],
                                   rtol=1e-5)
        # ipu_replication_normalise(cross_replica_sum(loss)): the mean over every replica
        np.testing.assert_allclose(got["means"], np.repeat(losses.mean(1, keepdims=True),
                                                           local_replicas, 1), rtol=1e-5)


def test_lookup_clips_reshapes_and_validates():
    import tensorflow as tf
    from tensorflow.python.ipu import embedding_ops

    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    embedding = embedding_ops.create_host_embedding("lookup_only", [4, 3], np.float32,
                                                    initializer=table)
    ids = np.array([[0, 3], [7, -2]], np.int32)
    rows = embedding.lookup(tf.constant(ids))
    assert rows.shape == (2, 2, 3)
    np.testing.assert_array_equal(rows.numpy(), table[np.clip(ids, 0, 3)])
    np.testing.assert_array_equal(embedding.get_embedding_tensor().numpy(), table)
    with embedding.register() as registered:  # eager: no session needed
        assert registered is embedding
    with pytest.raises(ValueError, match="Unknown partition strategy ROW"):
        embedding_ops.create_host_embedding("bad", [4, 3], np.float32, partition_strategy="ROW")
    with pytest.raises(ValueError, match="not a HostEmbeddingOptimizerSpec"):
        embedding_ops.HostEmbedding("bad", embedding.get_embedding_tensor(), optimizer_spec=0.1)
    spec = embedding_ops.HostEmbeddingSGDGAOptimizerSpec(0.5, 4)
    assert (spec.get_learning_rate(), spec.get_accumulation_factor()) == (0.5, 4)


def test_sdk_internal_modules_import_and_refuse_only_when_used():
    import tensorflow as tf
    import tensorflow.compiler.plugin.poplar.ops.gen_popops_ops as gen_popops_ops
    from tensorflow.compiler.plugin.poplar.driver import config_pb2, threestate_pb2
    from tensorflow.compiler.plugin.poplar.driver.trace_pb2 import IpuTraceEvent
    from tensorflow.compiler.plugin.poplar.ops import (gen_ipu_ops, gen_pop_datastream_ops,
                                                        gen_poputil_ops)

    assert gen_ipu_ops.ipu_event_trace().numpy().tolist() == []
    assert float(gen_poputil_ops.ipu_replication_normalise(tf.constant(6.0))) == 6.0
    assert (IpuTraceEvent.EXECUTE, threestate_pb2.THREESTATE_UNDEFINED) == (5, 2)
    table = tf.Variable(tf.ones([2, 2]))
    np.testing.assert_array_equal(
        gen_pop_datastream_ops.ipu_host_embedding_deregister(table, "t").numpy(), np.ones([2, 2]))
    with pytest.raises(NotImplementedError, match=r"^tensorflow\.compiler\.plugin\.poplar\.ops\."
                       r"gen_poputil_ops\.ipu_stateful_gradient_accumulate is an IPU-only part "
                       r".*GradientAccumulationOptimizerV2"):
        gen_poputil_ops.ipu_stateful_gradient_accumulate(tf.ones([2]), num_mini_batches=2)
    # an op with a CPU meaning works (the rows at the indices), any other one refuses
    assert gen_popops_ops.ipu_multi_slice(tf.reshape(tf.range(4.0), [2, 2]), [1, 1]).numpy(
        ).tolist() == [[2.0, 3.0], [2.0, 3.0]]
    with pytest.raises(NotImplementedError,
                       match="gen_popops_ops.ipu_sequence_slice is an IPU-only"):
        gen_popops_ops.ipu_sequence_slice(tf.ones([2, 2]), tf.ones([2, 2]), [1], [0], [0])
    with pytest.raises(NotImplementedError, match=r"driver\.config_pb2\.IpuOptions is an IPU"):
        config_pb2.IpuOptions()
    with pytest.raises(AttributeError):
        gen_ipu_ops._private  # noqa: B018 (only public op names are stood in for)
