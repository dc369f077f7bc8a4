"""Programs written for Graphcore's IPU API (``from tensorflow.python import ipu``, ``import
popdist``, ``tensorflow.python.ipu.horovod``) run unedited: under poprun-lite and as one plain
process. A program that shards its dataset by instance index sees every sample exactly once per
epoch, and ends with the weights of one process on the same global batches (each replica reads
its own batches, so a global batch is the per-replica batch x every replica of every instance)."""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAMS = Path(__file__).parent / "programs_ipu"
LAYOUTS = [(2, None), (2, 4)]  # -np 2 (a replica each), -np 2 --num-replicas 4 (two each)


def python(*args, env=None, timeout=300):
    """The virtualenv's python, as a user runs it: no launcher, nothing on PYTHONPATH added."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def launch(program, out, *args, np_=2, replicas=None):
    opts = ["-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
    result = poprun(*opts, str(PROGRAMS / program), str(out), *args, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def outputs(out, prefix, n):
    return [json.loads((out / f"{prefix}-{i}.json").read_text()) for i in range(n)]


def test_the_alias_costs_no_import_at_start_and_can_be_turned_off():
    code = ("import sys; print(any(type(f).__name__ == 'ImportTableFinder' for f in sys.meta_path),"
            " sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'popdist',"
            " 'horovod') or m.startswith('popdist_launcher.ipu')))")
    on = python("-c", code)
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["True", "[]"]  # installed, and nothing imported early
    env = {**os.environ, "POPDIST_LAUNCHER_IPU_ALIAS": "0"}
    off = python("-c", "from tensorflow.python import ipu", env=env)
    assert off.returncode != 0
    assert "cannot import name 'ipu'" in off.stderr


def test_popdist_outside_the_launcher_is_one_instance():
    result = python("-c", "import sys, popdist, popdist.tensorflow; "
                    "print(popdist.isPopdistEnvSet(),"
                    " popdist.getNumInstances(), popdist.getInstanceIndex(),"
                    " popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),"
                    " popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(),"
                    " popdist.getDeviceId(), 'tensorflow' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "1", "0", "1", "1", "0", "1", "0", "False"]


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    """Each program run once by the virtualenv's python: the reference weights."""
    out = tmp_path_factory.mktemp("single")
    for program, rest in (("popdist_custom_loop.py", []), ("popdist_keras_fit.py", []),
                          ("ipu_estimator.py", [str(out / "model")])):
        result = python(str(PROGRAMS / program), str(out), *rest)
        assert result.returncode == 0, result.stderr[-4000:]
    return out


def assert_each_sample_once(seen_per_instance, num_samples=128):
    counts = Counter(i for seen in seen_per_instance for i in seen)
    assert sorted(counts) == list(range(num_samples))
    assert set(counts.values()) == {1}


def assert_same_weights(runs, reference):
    for run in runs:
        assert run["weights"] == runs[0]["weights"]  # identical on every instance
        np.testing.assert_allclose(run["weights"], reference["weights"], rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("np_, replicas", LAYOUTS)
def test_custom_loop(tmp_path, single_process, np_, replicas):
    result = launch("popdist_custom_loop.py", tmp_path, np_=np_, replicas=replicas)
    assert "does not shard datasets" not in result.stderr
    runs = outputs(tmp_path, "custom_loop", np_)
    (reference,) = outputs(single_process, "custom_loop", 1)
    assert [r["num_replicas_in_sync"] for r in runs] == [replicas or np_] * np_
    for epoch in range(2):
        assert_each_sample_once([[i for e, i in r["seen"] if e == epoch] for r in runs])
    assert_same_weights(runs, reference)
    assert {r["samples_all_instances"] for r in runs} == {256.0}  # ipu.horovod allreduce(Sum)
    assert {r["broadcast_from_0"] for r in runs} == {7.0}
    assert {r["average"] for r in runs} == {r["mean"] for r in runs} == {1.5}  # (1 + 2) / 2
    # ipu.distributed.allgather in a TF2 program is PopDist's (SDK 3.1+): stacked, [N, 1].
    assert [r["gathered"] for r in runs] == [[[i] for i in range(np_)]] * np_


@pytest.mark.slow
def test_a_program_that_does_not_shard_is_told_how(tmp_path):
    result = launch("popdist_custom_loop.py", tmp_path, "--no-shard")
    fix = "dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())"
    assert result.stderr.count(fix) == 1, result.stderr[-3000:]  # once, on instance 0
    runs = outputs(tmp_path, "custom_loop", 2)
    counts = Counter(i for r in runs for e, i in r["seen"] if e == 0)
    assert set(counts.values()) == {2}  # each instance read everything: the warning's numbers


@pytest.mark.slow
def test_ipu_multi_worker_strategy_says_when_it_shards_a_sharded_dataset(tmp_path):
    # TensorFlow's auto-sharding (Graphcore's IPUMultiWorkerStrategy keeps it) shards again.
    result = launch("popdist_custom_loop.py", tmp_path, "--multi-worker")
    assert result.stderr.count("this dataset is already sharded, so each instance reads 1/4") == 1
    runs = outputs(tmp_path, "custom_loop", 2)
    counts = Counter(i for r in runs for e, i in r["seen"] if e == 0)
    assert len(counts) == 128 // 4 * 2 and set(counts.values()) == {1}


@pytest.mark.slow
@pytest.mark.parametrize("np_, replicas", LAYOUTS)
def test_keras_fit(tmp_path, single_process, np_, replicas):
    launch("popdist_keras_fit.py", tmp_path, np_=np_, replicas=replicas)
    runs = outputs(tmp_path, "keras", np_)
    (reference,) = outputs(single_process, "keras", 1)
    for epoch in range(2):  # each replica reads its own batches; Keras counts steps by replica
        assert_each_sample_once([[i for e, i in r["seen"] if e == epoch] for r in runs])
    assert_same_weights(runs, reference)
    # fit's logs are the job's, as in graphcore/keras's distributed_test (PopDistStrategy: the
    # same loss on every instance): the mean over all replicas' batches, i.e. one process's loss
    # on the same global batches.
    for run in runs:
        assert run["loss"] == pytest.approx(reference["loss"], rel=1e-5)
    assert len(runs[0]["loss"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("np_, replicas, extra", [
    (2, None, []),
    (2, 4, []),
    (2, None, ["multi-worker", "--host-call"]),
    (2, 4, ["popdist", "--host-call"]),
])
def test_ipu_estimator(tmp_path, single_process, np_, replicas, extra):
    launch("ipu_estimator.py", tmp_path, str(tmp_path / "model"), *extra, np_=np_,
           replicas=replicas)
    runs = outputs(tmp_path, "estimator", np_)
    (reference,) = outputs(single_process, "estimator", 1)
    assert_each_sample_once([r["seen"] for r in runs])
    assert_same_weights(runs, reference)
    for run in runs:
        assert run["eval"]["mse"] == pytest.approx(reference["eval"]["mse"], rel=1e-5)
