"""tf.estimator on the running TensorFlow (popdist_launcher.compat.estimator): the estimator
modules import, ``tf.estimator`` / ``tf.compat.v1.estimator`` exist and load on first use, and on
TensorFlow 2.16+ the project's estimator_training numbers the tasks as RunConfig does."""
import json
import os
import subprocess
import sys
import textwrap

from popdist_launcher.compat import estimator


def python(code: str, **env) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"},
             "TF_CPP_MIN_LOG_LEVEL": "3", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_versions_that_need_the_stand_ins():
    assert not estimator.needed("2.15.1")
    assert not estimator.needed("1.15.5")
    assert estimator.needed("2.16.0rc0")
    assert estimator.needed("2.21.0")
    assert estimator.needed("3.0.0")
    assert estimator.needed("nightly")  # unreadable: treated as the newest


def test_start_up_imports_none_of_it():
    seen = python("""
        import json, sys
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(
            ("tensorflow", "popdist_launcher.compat.estimator")))))
    """)
    assert seen == []


def test_estimator_modules_import_and_tf_estimator_exists():
    got = python("""
        import json, sys
        import tensorflow as tf
        import tensorflow.compat.v1 as v1
        loaded_early = sorted(m for m in sys.modules if m.startswith("tensorflow_estimator"))
        attached = [hasattr(tf, "estimator"), hasattr(tf.compat.v1, "estimator"),
                    hasattr(tf.compat.v2, "estimator"), hasattr(v1, "estimator")]
        names = [tf.estimator.Estimator.__name__, tf.estimator.RunConfig.__name__,
                 tf.estimator.train_and_evaluate.__name__, tf.estimator.ModeKeys.TRAIN,
                 v1.estimator.Estimator.__name__, v1.estimator.tpu.TPUEstimator.__name__,
                 tf.compat.v2.estimator.EstimatorSpec.__name__]
        from tensorflow_estimator.python.estimator import estimator, run_config, training
        from tensorflow.estimator import LinearRegressor
        training_module = sys.modules["tensorflow.python.distribute.estimator_training"]
        tpu_error = None
        try:
            from tensorflow.python.tpu import tpu_embedding
            tpu_embedding.AdagradParameters(0.1)
        except NotImplementedError as exc:
            tpu_error = str(exc)
        print(json.dumps({
            "version": tf.__version__, "loaded_early": loaded_early, "attached": attached,
            "names": names, "module_type": type(tf.estimator).__name__,
            "same": tf.estimator is sys.modules[tf.estimator.__name__],
            "api_names": list(tf.estimator.Estimator._estimator_api_names),
            "training": training_module.__name__, "tpu_error": tpu_error,
            "linear": LinearRegressor is tf.estimator.LinearRegressor}))
    """)
    assert got["loaded_early"] == []  # imported on first use, as TensorFlow 2.15 does it
    assert got["attached"] == [True, True, True, True]
    assert got["names"] == ["EstimatorV2", "RunConfig", "train_and_evaluate", "train",
                            "Estimator", "TPUEstimator", "EstimatorSpec"]
    assert got["module_type"] == "module" and got["same"]  # the lazy stand-in gave way
    assert got["api_names"] == ["estimator.Estimator"]
    assert got["linear"]
    if estimator.needed(got["version"]):
        assert got["training"] == "popdist_launcher.compat.estimator.estimator_training"
        assert "TensorFlow 2.15" in got["tpu_error"]
    else:  # TensorFlow's own modules, untouched
        assert got["training"] == "tensorflow.python.distribute.estimator_training"
        assert got["tpu_error"] is None


def test_tasks_are_numbered_as_run_config_numbers_them():
    # Each task of one cluster as the coordinator's context gives it to estimator_training, and
    # as a plain RunConfig reads it from TF_CONFIG: the same global ids and replica counts.
    got = python("""
        import json, os, types
        import tensorflow as tf
        from tensorflow.python.training import server_lib
        from popdist_launcher.compat.estimator import estimator_training
        cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4", "h:5"]}
        rows = []
        for task_type, n in (("chief", 1), ("worker", 2), ("ps", 2)):
            for index in range(n):
                os.environ["TF_CONFIG"] = json.dumps(
                    {"cluster": cluster, "task": {"type": task_type, "index": index}})
                expected = tf.estimator.RunConfig()
                config = tf.estimator.RunConfig()
                context = types.SimpleNamespace(
                    cluster_spec=server_lib.ClusterSpec(cluster), task_type=task_type,
                    task_id=index, master_target="", is_chief=task_type == "chief")
                estimator_training._adopt_worker_context(config, context)
                rows.append([(c.global_id_in_cluster, c.num_worker_replicas, c.num_ps_replicas,
                              c.is_chief) for c in (config, expected)])
        print(json.dumps(rows))
    """)
    assert [mine for mine, _ in got] == [theirs for _, theirs in got]
    assert [mine[0] for mine, _ in got] == [0, 1, 2, 3, 4]
