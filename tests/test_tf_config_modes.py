"""--tf-config auto|worker|chief|none and --evaluator: the TF_CONFIG each process gets (plan level),
what tf.estimator's RunConfig sees of it under auto (the default), and real programs through the
real CLI with no flag: a plain tf.estimator + Horovod program (as horovodrun runs it; under
--tf-config worker it fails with a hint) and tf.estimator.train_and_evaluate under
MultiWorkerMirroredStrategy with an evaluator; MultiWorkerMirroredStrategy under chief."""
import json
import os
import signal

import numpy as np
import pytest

from popdist_launcher import tf_config
from popdist_launcher.launcher.layout.plan import Host, build_plan
from tests.conftest import poprun, poprun_background, program, wait_for_files


def plan(n, mode="auto", evaluator=False, exported=()):
    return build_plan(["prog"], n, list(range(21000, 21000 + n)), ("127.0.0.1", 29999),
                      hosts=(Host("localhost", "127.0.0.1"),), tf_config_mode=mode,
                      evaluator=evaluator, evaluator_port=21999 if evaluator else 0,
                      exported_env=exported, job_id="j0b")


ADDRESSES = ["127.0.0.1:21000", "127.0.0.1:21001", "127.0.0.1:21002"]


def test_worker_mode_is_every_instance_a_worker():
    p = plan(3, "worker")
    for i in range(3):
        assert json.loads(p.instance_env(i)["TF_CONFIG"]) == {
            "cluster": {"worker": ADDRESSES}, "task": {"type": "worker", "index": i}}
    ranks = [tf_config.parse(p.instance_env(i)["TF_CONFIG"]) for i in range(3)]
    assert [(r.worker_index, r.is_chief) for r in ranks] == [(0, True), (1, False), (2, False)]
    assert "POPRUN_TF_CONFIG_AUTO" not in p.instance_env(0)


def test_auto_mode_is_the_worker_cluster_marked_for_the_library():
    auto, worker = plan(3), plan(3, "worker")
    for i in range(3):
        env = auto.instance_env(i)
        assert env["TF_CONFIG"] == worker.instance_env(i)["TF_CONFIG"]
        assert env["POPRUN_TF_CONFIG_AUTO"] == "1"
    evaluator = plan(2, evaluator=True).evaluator_env()
    assert evaluator["POPRUN_TF_CONFIG_AUTO"] == "1"
    assert evaluator["TF_CONFIG"] == plan(2, "worker", evaluator=True).evaluator_env()["TF_CONFIG"]
    # a TF_CONFIG the user exports applies as it is
    exported = (("TF_CONFIG", '{"task": {"type": "worker", "index": 0}}'),)
    env = plan(2, exported=exported).instance_env(1)
    assert env["TF_CONFIG"] == exported[0][1] and "POPRUN_TF_CONFIG_AUTO" not in env
    assert "POPRUN_TF_CONFIG_AUTO" not in plan(2, exported=exported, evaluator=True).evaluator_env()


def test_chief_mode_makes_instance_0_the_chief():
    p = plan(3, "chief")
    configs = [json.loads(p.instance_env(i)["TF_CONFIG"]) for i in range(3)]
    cluster = {"chief": ADDRESSES[:1], "worker": ADDRESSES[1:]}
    assert configs == [{"cluster": cluster, "task": {"type": "chief", "index": 0}},
                       {"cluster": cluster, "task": {"type": "worker", "index": 0}},
                       {"cluster": cluster, "task": {"type": "worker", "index": 1}}]
    # every instance keeps its rank: the training index of each task is its instance index
    ranks = [tf_config.parse(p.instance_env(i)["TF_CONFIG"]) for i in range(3)]
    assert [(r.worker_index, r.is_chief, r.num_workers) for r in ranks] == \
        [(0, True, 3), (1, False, 3), (2, False, 3)]
    one = json.loads(plan(1, "chief").instance_env(0)["TF_CONFIG"])
    assert one == {"cluster": {"chief": ADDRESSES[:1]}, "task": {"type": "chief", "index": 0}}


def test_none_mode_sets_no_tf_config_but_everything_else():
    p = plan(2, "none")
    for i in range(2):
        env = p.instance_env(i)
        assert "TF_CONFIG" not in env
        assert env["HOROVOD_RANK"] == str(i) and env["POPDIST_INSTANCE_INDEX"] == str(i)
    # a TF_CONFIG the user exports still wins, in every mode
    exported = (("TF_CONFIG", '{"task": {"type": "worker", "index": 0}}'),)
    assert plan(2, "none", exported=exported).instance_env(1)["TF_CONFIG"] == exported[0][1]


@pytest.mark.parametrize("mode", ["auto", "worker", "chief"])
def test_evaluator_env_is_outside_the_training_world(mode):
    p = plan(3, mode, evaluator=True, exported=(("MY_FLAG", "1"),))
    env = p.evaluator_env()
    parsed = json.loads(env["TF_CONFIG"])
    # the training cluster plus a partition of its own (TensorFlow's multi-worker layout); the
    # instances' TF_CONFIG does not list it
    training = json.loads(p.instance_env(0)["TF_CONFIG"])["cluster"]
    assert parsed == {"cluster": {**training, "evaluator": ["127.0.0.1:21999"]},
                      "task": {"type": "evaluator", "index": 0}}
    assert "evaluator" not in training
    evaluator = tf_config.parse(env["TF_CONFIG"])
    assert not evaluator.is_chief and evaluator.num_workers == 3
    assert env["MY_FLAG"] == "1" and env["POPRUN_JOB_ID"] == "j0b"
    assert not [k for k in env if k.startswith(("POPDIST_", "HOROVOD_"))]
    assert p.num_instances == 3 and len(p.instances) == 3  # not counted in -np


def test_require_cluster_names_the_fix():
    tf_config.require_cluster("S", {"POPDIST_NUM_INSTANCES": "1"})  # one instance: fine
    tf_config.require_cluster("S", {"POPDIST_NUM_INSTANCES": "2", "TF_CONFIG": plan(
        2).instance_env(0)["TF_CONFIG"]})
    with pytest.raises(tf_config.TFConfigError, match="--tf-config auto"):
        tf_config.require_cluster("S", {"POPDIST_NUM_INSTANCES": "2"})


def test_cli_rejects_evaluator_without_a_cluster_and_unknown_modes():
    result = poprun("-np", "2", "--tf-config", "none", "--evaluator", "--print-topology", "true")
    assert result.returncode == 2, result.stderr
    assert "--evaluator" in result.stderr and "Traceback" not in result.stderr
    result = poprun("-np", "2", "--tf-config", "master", "true")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # POPRUN_TF_CONFIG and POPRUN_EVALUATOR, as every option
    result = poprun("-np", "2", "--print-topology", "true",
                    env={**os.environ, "POPRUN_TF_CONFIG": "chief", "POPRUN_EVALUATOR": "1"})
    assert result.returncode == 0, result.stderr
    assert '"task":{"type":"evaluator","index":0}' in result.stdout
    assert '"chief":["' in result.stdout


def test_config_file_key(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('tf-config = "none"\n')
    result = poprun("--config", str(config), "-np", "2", "--print-topology", "true")
    assert result.returncode == 0, result.stderr
    assert "TF_CONFIG=" not in result.stdout and "HOROVOD_RANK=1" in result.stdout


# ---- real programs through the real CLI --------------------------------------------------------
TRUE_W = np.array([[1.0], [-2.0], [0.5], [3.0]])


def data(rows):
    x = np.random.default_rng(0).normal(size=(rows, 4)).astype("float32")
    return x, x @ TRUE_W.astype("float32")


def read_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.slow
def test_plain_estimator_with_horovod_trains_by_default_and_fails_under_worker(tmp_path):
    # what horovodrun runs: under the default a plain RunConfig sees no cluster
    result = poprun("-np", "2", program("estimator_horovod_plain.py"), str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--tf-config" not in result.stderr
    weights = [np.array(read_json(tmp_path / f"hvd-est-{r}.json")["w"]) for r in range(2)]
    # the reference: both ranks start from rank 0's zeros (rank 1 built ones) and every step
    # applies the gradient averaged over the two ranks' batches of 4
    x, y = data(16)
    w = np.zeros((4, 1))
    for step in range(4):
        grads = []
        for rank in range(2):
            xs, ys = x[rank::2][step % 2 * 4:][:4], y[rank::2][step % 2 * 4:][:4]
            grads.append(2 / 4 * xs.T @ (xs @ w - ys))
        w -= 0.1 * np.mean(grads, axis=0)
    assert np.array_equal(weights[0], weights[1])
    np.testing.assert_allclose(weights[0], w.ravel(), rtol=1e-5, atol=1e-6)

    # --tf-config worker: every RunConfig sees the worker cluster, which tf.estimator refuses;
    # the summary says what to do, once
    failed = poprun("-np", "2", "--backend", "local", "--tf-config", "worker",
                    program("estimator_horovod_plain.py"), str(tmp_path / "worker"), timeout=180)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert 'must have one "chief" node' in failed.stderr
    hints = [line for line in failed.stderr.splitlines() if "--tf-config chief" in line]
    assert hints == ["poprun-lite: " + tf_config.NO_CHIEF_HINT], failed.stderr[-3000:]


RUN_CONFIG_VIEWS = """
import json, os, sys, threading
import tensorflow as tf
from tensorflow.python.ipu import ipu_run_config
real = os.environ["TF_CONFIG"]
seen = []  # what another thread reads while RunConfigs are built: always the real TF_CONFIG
stop = threading.Event()
def watch():
    while not stop.is_set():
        seen.append(os.environ.get("TF_CONFIG"))
watcher = threading.Thread(target=watch)
watcher.start()
def describe(config):
    return [config.task_type, config.task_id, config.cluster_spec.as_dict(), config.is_chief,
            config.num_worker_replicas]
out = {"plain": describe(tf.estimator.RunConfig()),
       "mirrored": describe(tf.estimator.RunConfig(
           train_distribute=tf.distribute.MirroredStrategy(["/cpu:0"]))),
       "ipu": describe(ipu_run_config.RunConfig()),
       "default": describe(tf.estimator.Estimator(lambda features, labels, mode: None).config)}
stop.set()
watcher.join()
out["environ"] = os.environ["TF_CONFIG"] == real and set(seen) == {real}
print(json.dumps(out))
"""


def test_auto_shows_a_plain_run_config_no_cluster_and_keeps_the_environment():
    """Real TensorFlow in one process with an instance's and the evaluator's auto TF_CONFIG: a
    RunConfig with no strategy, or one that asks for no cluster, sees none (an evaluator sees a
    chief); IPU's RunConfig reads the cluster itself; os.environ never changes."""
    import subprocess
    import sys

    def views(env):
        run = subprocess.run([sys.executable, "-c", RUN_CONFIG_VIEWS], capture_output=True,
                             text=True, timeout=300,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env})
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout.splitlines()[-1])

    auto = plan(2, evaluator=True)
    worker = views({k: auto.instance_env(1)[k] for k in ("TF_CONFIG", "POPRUN_TF_CONFIG_AUTO")})
    local = ["worker", 0, {}, True, 1]
    assert worker == {"plain": local, "mirrored": local, "default": local,
                      "ipu": ["worker", 1, {}, False, 2], "environ": True}
    evaluator = views({k: auto.evaluator_env()[k] for k in ("TF_CONFIG", "POPRUN_TF_CONFIG_AUTO")})
    outside = ["evaluator", 0, {}, False, 0]  # tf.estimator's evaluator, outside the cluster
    assert evaluator["plain"] == evaluator["default"] == outside and evaluator["environ"]


@pytest.mark.slow
def test_multi_worker_mirrored_custom_loop_with_a_chief(tmp_path):
    # the default layout (workers only) runs the same kind of loop in
    # test_horovod_and_tensorflow.py::test_multi_worker_mirrored_strategy_on_launcher_tf_config
    result = poprun("-np", "2", "--tf-config", "chief", program("mwms_weights.py"), str(tmp_path),
                    timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [read_json(tmp_path / f"mwms-{i}.json") for i in range(2)]
    assert [(r["task_type"], r["task_id"]) for r in runs] == [("chief", 0), ("worker", 0)]
    assert [r["chief"] for r in runs] == [True, False] and runs[0]["replicas"] == 2
    x, y = data(8)
    w = np.zeros((4, 1))
    for _ in range(3):  # gradients of sum((xw-y)^2)/8 over each shard, summed over replicas
        w -= 0.1 * sum(2 / 8 * x[i::2].T @ (x[i::2] @ w - y[i::2]) for i in range(2))
    assert runs[0]["w"] == runs[1]["w"]
    np.testing.assert_allclose(runs[0]["w"], w.ravel(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_train_and_evaluate_with_mwms_and_an_evaluator_by_default(tmp_path):
    logs = tmp_path / "logs"
    # the default: RunConfig(train_distribute=MultiWorkerMirroredStrategy()) sees the cluster
    result = poprun("-np", "2", "--evaluator", "--output-dir", str(logs),
                    program("estimator_mwms_evaluate.py"), str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    trained = read_json(tmp_path / "trained.json")
    evaluated = read_json(tmp_path / "evaluated.json")
    assert trained["global_step"] == 6
    # the evaluator evaluated the final checkpoint: its loss is the trained weights' loss on the
    # evaluation data (8 rows, labels shifted by 0.5)
    x, y = data(16)
    w = np.array(trained["w"]).reshape(4, 1)
    expected = float(np.mean((x[:8] @ w - (y[:8] + 0.5)) ** 2))
    assert "6" in evaluated
    assert evaluated["6"] == pytest.approx(expected, rel=1e-5)
    assert "[evaluator]<stdout>:evaluator: evaluated global steps" in result.stdout
    assert "evaluator: evaluated" in (logs / "attempt-0" / "evaluator.stdout.log").read_text()
    assert not (logs / "attempt-0" / "instance-2.stdout.log").exists()


# ---- the evaluator is supervised like an instance (shell programs: no TensorFlow) ---------------
IS_EVALUATOR = 'case "$TF_CONFIG" in *\\"evaluator\\",*) true;; *) false;; esac'


@pytest.mark.parametrize("backend", ["local", "mpi"])
def test_none_hides_a_tf_config_the_launcher_inherited(backend):
    """poprun-lite run where TF_CONFIG is already set (a TFJob pod): none means none."""
    env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": ["pod-0:2222"]},
                                                 "task": {"type": "worker", "index": 0}}))
    code = "import os; print('tf_config' if 'TF_CONFIG' in os.environ else 'no tf_config')"
    result = poprun("-np", "2", "--backend", backend, "--tf-config", "none", "python", "-c", code,
                    env=env)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n"))[1:] == ["[0]<stdout>:no tf_config",
                                                    "[1]<stdout>:no tf_config"], result.stdout
    assert "POPRUN_UNSET" not in result.stdout


@pytest.mark.parametrize("backend", ["local", "mpi"])
def test_the_job_waits_for_the_evaluator_and_fails_with_it(tmp_path, backend):
    done = tmp_path / "evaluated"
    # the instances end at once; the job still waits for the evaluator, outside the world
    script = (f'if {IS_EVALUATOR}; then sleep 1; echo "world=${{HOROVOD_SIZE:-none}}" > {done}; '
              f'echo evaluating; fi')
    result = poprun("-np", "2", "--backend", backend, "--evaluator", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert done.read_text() == "world=none\n"
    assert "[evaluator]<stdout>:evaluating" in result.stdout
    # its failure is the job's, named as such, and stops the instances
    script = f'if {IS_EVALUATOR}; then echo broken >&2; exit 3; fi; sleep 60'
    result = poprun("-np", "2", "--backend", backend, "--evaluator", "--grace-period", "1",
                    "sh", "-c", script, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "poprun-lite: evaluator exited with code 3" in result.stderr
    assert "last 1 line(s) of evaluator's stderr:\n    broken" in result.stderr


def test_an_instance_failure_stops_the_evaluator(tmp_path):
    script = (f'if {IS_EVALUATOR}; then exec sleep 60; fi; '
              f'[ "$POPDIST_INSTANCE_INDEX" = 1 ] && exit 5; exit 0')
    result = poprun("-np", "2", "--backend", "local", "--evaluator", "--grace-period", "1",
                    "sh", "-c", script, timeout=60)
    assert result.returncode == 5, result.stderr
    assert "instance 1 exited with code 5" in result.stderr
    assert "evaluator: was killed by SIGTERM (stopped by poprun-lite)" in result.stderr


def test_signals_reach_the_evaluator(tmp_path):
    started, got = tmp_path / "started", tmp_path / "got"
    script = (f'if {IS_EVALUATOR}; then trap "echo TERM > {got}; exit 0" TERM; '
              f'echo up > {started}; while true; do sleep 0.1; done; fi; sleep 60')
    proc = poprun_background("-np", "1", "--backend", "local", "--evaluator", "--grace-period",
                             "5", "sh", "-c", script)
    try:
        wait_for_files([started], timeout=60)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert got.read_text() == "TERM\n"
