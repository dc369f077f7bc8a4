"""The three strategies under the launcher: semantics, and the core equivalence test (N instances
on a global batch end with the weights of one process on that batch), with Keras 2 and, on
TensorFlow 2.16+, Keras 3 (what a program that is not written for Keras 2 gets)."""
import json

import numpy as np
import pytest

from conftest import KERAS_2, LEGACY_KERAS, job_environ, poprun

pytestmark = pytest.mark.slow
STRATEGIES = ["popdist", "horovod", "multi-worker"]


KERAS_3_STACK = KERAS_2 == "tf_keras"  # TensorFlow 2.16+: Keras 3 unless the program is Keras 2
LEGACY = ["-x", "TF_USE_LEGACY_KERAS=1"] if KERAS_3_STACK else []


def run_worker(script, *args, np_=2, replicas=None, timeout=600, opts=(), env=None):
    opts = [*opts, "-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
    result = poprun(*opts, f"tests/workers/{script}", *args, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def semantics(tmp_path_factory):
    """A function from a case to its instances' records. The job of its replica count checks
    PopDistStrategy and IPUHorovodStrategy one after the other, each with a strategy and
    variables of its own; IPUMultiWorkerStrategy has a job of its own (it makes the process a
    worker of TensorFlow's cluster). Each job starts when one of its cases is first asked for."""
    launches = {}

    def results(strategy, replicas):
        checked = ("multi-worker",) if strategy == "multi-worker" else ("popdist", "horovod")
        if (checked, replicas) not in launches:
            out = tmp_path_factory.mktemp(f"semantics-{replicas}")
            opts = ["-np", "2"] + (["--num-replicas", str(replicas)] if replicas else [])
            launches[checked, replicas] = out, poprun(
                *opts, "tests/workers/strategy_semantics.py", ",".join(checked), str(out),
                timeout=600)
        out, result = launches[checked, replicas]
        assert result.returncode == 0, f"the launch of {checked} with replicas {replicas} " \
            f"failed:\n{result.stderr[-4000:]}"
        return [json.loads((out / f"semantics-{strategy}-{i}.json").read_text()) for i in range(2)]
    return results


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("replicas", [None, 4])
def test_semantics(semantics, strategy, replicas):
    R = replicas or 2
    ids = list(range(R))
    for i, got in enumerate(semantics(strategy, replicas)):
        assert got["num_replicas_in_sync"] == R
        assert got["should_checkpoint"] == (i == 0)
        assert got["initial"] == 1.0  # instance 0's initial value, everywhere
        assert got["on_read_mean"] == pytest.approx(np.mean(ids))
        assert got["on_read_sum"] == pytest.approx(sum(ids))
        assert got["reduce_sum"] == pytest.approx(sum(ids))
        assert got["reduce_mean"] == pytest.approx(np.mean(ids))
        assert "not supported" in got["reduce_max_error"]
        if strategy != "multi-worker":
            # float: the exact mean; integer: its exact sum floor-divided by the replicas
            assert got["mixed_mean"] == [np.mean(ids) + 0.5, sum(3 * r + 1 for r in ids) // R]
        G = 2 * R
        assert got["batches"] == [list(range(s * G, (s + 1) * G)) for s in range(3)]
        np.testing.assert_allclose(got["bn_moving_mean"], got["bn_expected_mean"],
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["bn_moving_variance"], got["bn_expected_variance"],
                                   rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    run_worker("train_equivalence.py", "reference", "none", str(out), np_=1)
    return json.loads((out / "reference-0.json").read_text())["history"]


# The launches of the equivalence cases: np, --num-replicas and the (mode, strategy) cases that
# one job trains in this order, each with a strategy and a model of its own. Keras 2 (the program
# asks for it with TF_USE_LEGACY_KERAS=1 on TensorFlow 2.16+), and Keras 3 (a program that is not
# written for Keras 2). IPUMultiWorkerStrategy shares its process with no other strategy (it makes
# the process a worker of TensorFlow's cluster), but two of them in one process is a case of its
# own (the second reuses the collective ops the first enabled); on each stack PopDistStrategy and
# IPUHorovodStrategy each come first in a fresh process.
KERAS_2_LAUNCHES = [
    (2, 4, [("tf2", "multi-worker")]),
    (2, 4, [("tf2", "horovod"), ("tf2", "popdist"), ("tf1", "popdist"), ("keras", "popdist")]),
    (2, None, [("keras", "popdist"), ("tf1", "horovod"), ("tf2", "horovod")]),
]
KERAS_3_LAUNCHES = [
    (2, None, [("keras", "multi-worker"), ("keras-loop", "multi-worker")]),
    (2, None, [("keras", "popdist"), ("keras-loop", "popdist"), ("keras-loop", "horovod"),
               ("keras", "horovod")]),
    (2, 4, [("keras", "horovod"), ("keras", "popdist")]),
    (4, None, [("keras", "multi-worker")]),
    (4, None, [("keras-loop", "popdist"), ("keras", "popdist"), ("keras-loop", "horovod")]),
]
LAUNCHES = {"2": KERAS_2_LAUNCHES, "3": KERAS_3_LAUNCHES}


def cases(launches):
    """(mode, strategy, np, replicas) of every case of ``launches``."""
    return [(mode, strategy, np_, replicas) for np_, replicas, trained in launches
            for mode, strategy in trained]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A function from a case to its instances' records. The case's launch starts when one of
    its cases is first asked for, and only once; its job writes one file per case and instance."""
    launches = {}

    def results(mode, strategy, np_, replicas, keras):
        (launch,) = [i for i, (n, r, trained) in enumerate(LAUNCHES[keras])
                     if (n, r) == (np_, replicas) and (mode, strategy) in trained]
        names = [f"{m}@{s}" for m, s in LAUNCHES[keras][launch][2]]
        if (keras, launch) not in launches:
            out = tmp_path_factory.mktemp(f"keras{keras}-launch{launch}")
            opts = ["-np", str(np_)] + (["--num-replicas", str(replicas)] if replicas else [])
            if keras == "2":
                opts, env = [*LEGACY, *opts], None
            else:
                env = {k: v for k, v in job_environ().items() if k != LEGACY_KERAS}
            launches[keras, launch] = out, poprun(
                *opts, "tests/workers/train_equivalence.py", ",".join(names), "none", str(out),
                timeout=600, env=env)
        out, result = launches[keras, launch]
        assert result.returncode == 0, f"the launch of {names} (np {np_}, replicas {replicas}) " \
            f"failed:\n{result.stderr[-4000:]}"
        return [json.loads((out / f"{mode}@{strategy}-{i}.json").read_text()) for i in range(np_)]
    return results


@pytest.mark.parametrize("mode, strategy, np_, replicas", cases(KERAS_2_LAUNCHES))
def test_equivalence_with_one_process(trained, reference, mode, strategy, np_, replicas):
    """Keras 2 (the program asks for it with TF_USE_LEGACY_KERAS=1 on TensorFlow 2.16+)."""
    assert_equivalent(trained(mode, strategy, np_, replicas, "2"), reference, "2")


@pytest.mark.skipif(not KERAS_3_STACK, reason="TensorFlow 2.15 has no Keras 3")
@pytest.mark.parametrize("mode, strategy, np_, replicas", cases(KERAS_3_LAUNCHES))
def test_keras_3_equivalence_with_one_process(trained, reference, mode, strategy, np_, replicas):
    """Keras 3 fit and custom loops (Keras layers and optimizer made under strategy.scope()) on
    a program that is not written for Keras 2: the weights of one process on the same batch."""
    assert_equivalent(trained(mode, strategy, np_, replicas, "3"), reference, "3")


def assert_equivalent(results, reference, keras):
    if KERAS_3_STACK:
        assert [r["keras"] for r in results] == [keras] * len(results)
    histories = [r["history"] for r in results]
    assert len(histories[0]) == len(reference) == 4
    for step, (first, *others, ref) in enumerate(zip(*histories, reference)):
        assert all(other == first for other in others), f"instances differ after step {step}"
        np.testing.assert_allclose(first, ref, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")
