"""Keras per program (popdist_launcher.compat.keras2, the startup hook): on TensorFlow 2.16+ a
program gets TensorFlow's own Keras (Keras 3) unless it is written for Keras 2 (an IPU program, one
using Horovod's Keras API, or TF_USE_LEGACY_KERAS=1), then ``import keras`` and ``tf.keras`` are
Keras 2 (tf-keras); the launcher passes its instances no decision of its own. On TensorFlow 2.15
Keras 2 is all there is and the variable stays unset. What needs Keras 2 in a Keras 3 program stops
with one sentence."""
import json
import os
import subprocess
import sys

import pytest
from conftest import KERAS_2, poprun

NEW_STACK = KERAS_2 == "tf_keras"
SWITCH = "TF_USE_LEGACY_KERAS"


def _env_without_the_switch() -> dict:
    return {k: v for k, v in os.environ.items() if k != SWITCH}


def test_instances_get_no_keras_switch_of_the_launchers_own():
    result = poprun("-np", "2", "--backend", "local", "sh", "-c",
                    f'echo "switch=${{{SWITCH}-unset}}"', env=_env_without_the_switch())
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["[0]<stdout>:switch=unset",
                                             "[1]<stdout>:switch=unset"], result.stdout


def test_a_users_own_choice_reaches_every_instance():
    result = poprun("-np", "1", "--backend", "local", "sh", "-c", f'echo "switch=${SWITCH}"',
                    env={**os.environ, SWITCH: "0"})
    assert result.returncode == 0 and "switch=0" in result.stdout, result.stderr


REPORT = """
import json, os, sys
import tensorflow as tf
import keras
print("KERAS", json.dumps([os.environ.get("TF_USE_LEGACY_KERAS"), keras.__name__,
                           keras.__version__.split(".")[0],
                           tf.keras.Model.__module__.split(".")[0],
                           keras.layers.Dense is tf.keras.layers.Dense]))
"""
# Each program's own source says what it is written for (anywhere in the file).
PROGRAMS = {
    "plain": REPORT,
    "ipu": "from tensorflow.python import ipu  # noqa\n" + REPORT,
    "horovod_keras": REPORT + "\ndef later():\n    import horovod.tensorflow.keras as hvd\n",
    "estimator": REPORT + "\nconfig = tf.estimator.RunConfig()\n",
    "tf1": "import tensorflow.compat.v1 as tf1  # noqa\n" + REPORT,
}
KERAS_3 = [None, "keras", "3", "keras", True]
KERAS_2_SET = ["1", "tf_keras", "2", "tf_keras", True]
KERAS_2_215 = [None, "keras", "2", "keras", True]  # TensorFlow 2.15: its own Keras 2, unset


def _reports(stdout: str) -> list:
    return [json.loads(line.split("KERAS ", 1)[1]) for line in stdout.splitlines()
            if "KERAS " in line]


@pytest.mark.slow
@pytest.mark.parametrize("kind, user_value, expected", [
    ("plain", None, KERAS_3),
    ("ipu", None, KERAS_2_SET),
    ("horovod_keras", None, KERAS_2_SET),
    ("estimator", None, KERAS_2_SET),
    ("tf1", None, KERAS_2_SET),
    ("plain", "1", KERAS_2_SET),
    ("ipu", "0", ["0", "keras", "3", "keras", True]),  # the user's 0 wins
])
def test_each_program_gets_the_keras_it_is_written_for(tmp_path, kind, user_value, expected):
    path = tmp_path / f"{kind}.py"
    path.write_text(PROGRAMS[kind])
    env = _env_without_the_switch()
    if user_value is not None:
        env[SWITCH] = user_value
    result = poprun("-np", "2", "--backend", "local", sys.executable, str(path), env=env,
                    timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # TensorFlow 2.15: its own Keras 2 whatever the user set (its tf.keras would not load with
    # the variable set, which each program's start-up hook therefore takes out).
    want = expected if NEW_STACK else KERAS_2_215
    assert _reports(result.stdout) == [want, want], result.stdout


@pytest.mark.slow
def test_plain_python_in_the_environment_gets_tensorflows_own_keras():
    result = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True,
                            timeout=300, env=_env_without_the_switch())
    assert result.returncode == 0, result.stderr[-3000:]
    assert _reports(result.stdout) == [KERAS_3 if NEW_STACK else KERAS_2_215]


@pytest.mark.slow
def test_horovods_keras_module_imported_unseen_in_a_keras_3_program_says_one_sentence():
    # The module's name is built at run time: the program's source does not show it, so the
    # program was given Keras 3 when TensorFlow imported.
    code = ("import importlib, tensorflow as tf\n"
            "hvd = importlib.import_module('horovod.tensorflow.' + 'keras'); print('imported')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env=_env_without_the_switch())
    if NEW_STACK:
        assert result.returncode != 0
        assert ("horovod.tensorflow.keras needs Keras 2, but this program has Keras 3 "
                "(TensorFlow 2.") in result.stderr, result.stderr[-3000:]
        assert "use PopDistStrategy" in result.stderr and f"{SWITCH}=1" in result.stderr
    else:  # TensorFlow 2.15's Keras is Keras 2
        assert result.returncode == 0 and "imported" in result.stdout, result.stderr[-3000:]


IPU_METHOD = """
import tensorflow as tf
from popdist_launcher.strategies import PopDistStrategy
strategy = PopDistStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
try:
    model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2)
    print("SAID nothing")
except ImportError as exc:
    print("SAID", exc)
"""


@pytest.mark.slow
def test_an_ipu_keras_method_in_a_keras_3_program_says_one_sentence(tmp_path):
    path = tmp_path / "keras3_ipu_method.py"
    path.write_text(IPU_METHOD)
    result = poprun("-np", "1", "--backend", "local", sys.executable, str(path),
                    env=_env_without_the_switch(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line.split("SAID ", 1)[1] for line in result.stdout.splitlines() if "SAID " in line]
    if NEW_STACK:
        assert said and said[0].startswith(
            "Model.set_gradient_accumulation_options needs Keras 2, "
            "but this program has Keras 3"), said
        assert "exist for Keras 2 only" in said[0] and f"{SWITCH}=1" in said[0]
    else:
        assert said == ["nothing"]


@pytest.mark.parametrize("source, found", [
    ("import tensorflow as tf\nm = tf.keras.Sequential()", None),
    ("import keras\nx = keras.ops.mean", None),
    ("import tensorflow.compat.v2 as tf", None),
    ("import os\nself_estimator = object()\nx = self_estimator.estimator", None),
    ("from tensorflow.python import ipu", "tensorflow.python.ipu"),
    ("from popdist_launcher import ipu", "popdist_launcher.ipu"),
    ("def f():\n    import horovod.keras as hvd", "horovod.keras"),
    ("from horovod.tensorflow import keras as hvd", "horovod.tensorflow"),
    ("import horovod.tensorflow as hvd", "horovod.tensorflow"),
    ("import tf_keras", "tf_keras"),
    ("from tensorflow.python.keras import layers", "tensorflow.python.keras"),
    ("from keras.optimizer_v2 import adam", "keras.optimizer_v2"),
    ("import tensorflow as tf\nc = tf.estimator.RunConfig()", "tensorflow.estimator"),
    ("import tensorflow as tf\nc = tf.compat.v1.estimator.Estimator", "tensorflow.estimator"),
    ("import tensorflow.compat.v1 as tf", "tensorflow.compat.v1"),
])
def test_what_in_a_programs_source_marks_it_a_keras_2_program(source, found):
    from popdist_launcher.compat import ipu_program
    from popdist_launcher.compat import keras2
    result = ipu_program.graphcore_import(("__main__", "", None, source),
                                           matches=keras2.keras_2_api)
    assert (result and result[1]) == found
