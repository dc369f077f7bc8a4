"""Keras on the IPU layer: Graphcore's rule for replicas of a pipelined model (IPUs per replica
from the pipeline stages or device_mapping, rounded up to a power of two), and pipelined Keras
models on auto_select_ipus = 4 with 2 stages training as 2 replicas of 2 IPUs, exact vs NumPy,
as one process and under ``poprun-lite -np 2``; Keras on arrays given no batch size over 4
replicas (Graphcore's batches of 32, leftover batches dropped) equal to one device on the same
global batches."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun
from popdist_launcher.ipu_runtime.keras.data_adapter import array_batch_size, num_batches
from popdist_launcher.ipu_runtime.keras.replicas import replica_layout

PROGRAMS = Path(__file__).parent / "programs"

rng = np.random.default_rng(3)
X = rng.normal(size=(32, 3)).astype(np.float32).astype(np.float64)
Y = rng.normal(size=(32, 1)).astype(np.float32).astype(np.float64)
W1 = rng.normal(size=(3, 2)).astype(np.float32).astype(np.float64)
W2 = rng.normal(size=(2, 1)).astype(np.float32).astype(np.float64)


def two_layer_reference(method, replicas=2, accumulation=2, lr=0.01, batch=2, epochs=2):
    """Gradient descent on x @ w1 @ w2 with MSE: each update sums the gradients of
    ``replicas`` x ``accumulation`` consecutive batches (replica r of step s reads batch
    s * replicas + r), each replica's divided by ``accumulation`` for MEAN."""
    w1, w2, losses = W1.copy(), W2.copy(), []
    per_update = replicas * accumulation
    batches = [(X[i:i + batch], Y[i:i + batch]) for i in range(0, len(X), batch)]
    for _ in range(epochs):
        epoch = []
        for u in range(len(batches) // per_update):
            g1, g2 = np.zeros_like(w1), np.zeros_like(w2)
            for x, y in batches[u * per_update:(u + 1) * per_update]:
                h = x @ w1
                e = h @ w2 - y
                dy = 2 * e / len(x)
                g2 += h.T @ dy
                g1 += x.T @ (dy @ w2.T)
                epoch.append(float((e ** 2).mean()))
            scale = 1.0 / accumulation if method == "mean" else 1.0
            w1, w2 = w1 - lr * scale * g1, w2 - lr * scale * g2
        losses.append(float(np.mean(epoch)))
    return w1, w2, losses


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_ipus,shards,local,ipus_per_replica,want", [
    (4, 2, 4, 1, (2, 2)),   # auto_select_ipus = 4, 2 stages: 2 replicas, each over 2 devices
    (4, 3, 4, 1, (1, 4)),   # 3 stages take 4 IPUs (a power of two)
    (4, 1, 4, 1, (4, 1)),   # not pipelined: one replica per IPU
    (8, 2, 8, 1, (4, 2)),
    (4, 2, 2, 2, (2, 1)),   # --ipus-per-replica 2: the devices already are the replicas
    (6, 4, 6, 1, (1, 6)),   # Graphcore's floor: 6 // 4
])
def test_replica_layout_follows_graphcores_rule(num_ipus, shards, local, ipus_per_replica, want):
    assert replica_layout(num_ipus, shards, local, ipus_per_replica) == want


def test_replica_layout_errors_name_the_fix():
    with pytest.raises(ValueError, match="requires a multiple of 8 IPUs"):
        replica_layout(4, 5, 4)
    with pytest.raises(ValueError, match="--ipus-per-replica 2"):  # PopDist runs 2 per instance
        replica_layout(2, 2, 2, popdist_local_replicas=2)
    with pytest.raises(ValueError, match="select 2 IPU"):
        replica_layout(4, 2, 1, single_replica_reason="TensorFlow had started")
    with pytest.raises(ValueError, match="multiple of 2 IPUs"):
        replica_layout(5, 2, 5)  # 5 devices cannot be 2 replicas of 2
    with pytest.raises(ValueError, match="--ipus-per-replica 4"):
        replica_layout(8, 4, 4, ipus_per_replica=2)


def check(got):
    for name, method, stages in (("functional", "mean", [0, 1, 1]), ("sequential", "sum", [0, 1])):
        w1, w2, losses = two_layer_reference(method)
        result = got[name]
        close(result["w1"], w1.ravel())
        close(result["w2"], w2.ravel())
        close(result["loss"], losses)
        assert result["iterations"] == 8  # 16 batches / (2 replicas x 2 micro-batches), 2 epochs
        close(result["evaluate"], float(((X @ w1 @ w2 - Y) ** 2).mean()))
        close(result["predict"], (X[:8] @ w1 @ w2).ravel())
        assert result["stages"] == stages  # functional: Dense, the outfeed layer, Dense
    # The stage-1 layer's outfeed: one element per micro-batch per replica (16 = 8 steps x 2
    # epochs), replica r of the first step holding batch r's hidden activations.
    assert got["activations_shape"] == [16, 2, 2, 2]
    close(got["activations_first"], [X[0:2] @ W1, X[2:4] @ W1])
    assert got["five_stages"] == ["ValueError", "Current device has 4 IPUs attached, however "
                                  "the current model requires a multiple of 8 IPUs."]
    assert got["pipeline_ops_two_ipus"][0] == "ValueError"
    assert "--ipus-per-replica 2" in got["pipeline_ops_two_ipus"][1]
    assert got["pipeline_ops_one_ipu"] == [[2.0] * 4, [2.0] * 4]  # [enqueues, replicas]


@pytest.mark.slow
def test_pipelined_keras_models_train_as_two_replicas_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAMS / "keras_pipelining.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    check(json.loads((tmp_path / "keras-pipelining-0.json").read_text()))


@pytest.mark.slow
def test_pipelined_keras_models_train_as_two_replicas_under_poprun(tmp_path):
    # Each instance trains its own IPUStrategy replicas, as on Graphcore's machines.
    result = poprun("-np", "2", str(PROGRAMS / "keras_pipelining.py"), str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check(json.loads((tmp_path / f"keras-pipelining-{index}.json").read_text()))


@pytest.mark.parametrize("rows,batch_size,steps,want_batch,want_batches", [
    (576, None, None, 32, 18),   # Keras's default batch of 32
    (576, 64, None, 64, 9),
    (576, None, 9, 64, 9),       # steps and no batch: Keras's rows / steps, rounded up
    (100, None, None, 32, 4),    # a partial last batch counts (replica_input refuses it)
])
def test_arrays_are_read_in_keras_batches(rows, batch_size, steps, want_batch, want_batches):
    x = np.zeros((rows, 3), np.float32)
    got_batch = array_batch_size(x, batch_size, steps)
    assert got_batch == want_batch
    assert num_batches({"features": x}, got_batch, steps) == want_batches


def check_array_replicas(got):
    """4 replicas of batch 32 on arrays given no batch size train as one device of batch 128
    (256 with 2 micro-batches accumulated by MEAN) at 4 times the learning rate, on the 16
    batches that fill whole steps of 4 replicas."""
    for name in ("plain", "accumulated"):
        replicas, one = got[name], got[f"{name}_one_device"]
        for w, w_one in zip(replicas["weights"], one["weights"]):
            close(w, w_one)
        close(replicas["loss"], one["loss"])
    close(got["plain"]["evaluate"], got["plain_one_device"]["evaluate"])
    assert len(got["plain"]["predict"]) == 16 * 32  # the kept rows, in input order
    close(got["plain"]["predict"], got["plain_one_device"]["predict"])
    dropped = ("Dataset of 18 batches is being evenly distributed between 4 replicas. The "
               "remaining 2 batch(es) will be dropped.")
    assert got["warnings"].count(dropped) == 4  # fit, evaluate, predict, fit


@pytest.mark.slow
def test_keras_on_arrays_without_batch_size_over_four_replicas_one_process(tmp_path):
    program = PROGRAMS / "keras_array_replicas.py"
    result = subprocess.run([sys.executable, str(program), str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    check_array_replicas(json.loads((tmp_path / "keras-array-replicas-0.json").read_text()))


@pytest.mark.slow
def test_keras_on_arrays_without_batch_size_over_four_replicas_under_poprun(tmp_path):
    result = poprun("-np", "2", str(PROGRAMS / "keras_array_replicas.py"), str(tmp_path),
                    timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check_array_replicas(json.loads(
            (tmp_path / f"keras-array-replicas-{index}.json").read_text()))
