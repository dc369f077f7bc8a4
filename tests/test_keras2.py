"""Keras 2 on both stacks (popdist_launcher._keras2, the startup hook): on TensorFlow 2.16+ every
program of the environment and every instance gets ``TF_USE_LEGACY_KERAS=1`` and ``import keras``
is tf.keras's Keras 2 (tf-keras); on TensorFlow 2.15 nothing changes. A program that chooses
Keras 3 is stopped by one sentence where Horovod's Keras support is imported."""
import json
import os
import subprocess
import sys

import pytest
from conftest import KERAS_2, poprun

NEW_STACK = KERAS_2 == "tf_keras"


def _env_without_the_switch() -> dict:
    return {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}


def test_every_instance_gets_keras_2_where_tf_keras_is_installed():
    result = poprun("-np", "2", "--backend", "local", "sh", "-c",
                    'echo "switch=${TF_USE_LEGACY_KERAS-unset}"', env=_env_without_the_switch())
    assert result.returncode == 0, result.stderr
    want = "switch=1" if NEW_STACK else "switch=unset"  # TF 2.15's tf.keras breaks with it set
    assert sorted(result.stdout.split()) == sorted([f"[0]<stdout>:{want}",
                                                    f"[1]<stdout>:{want}"]), result.stdout


def test_a_users_own_choice_reaches_every_instance():
    result = poprun("-np", "1", "--backend", "local", "sh", "-c",
                    'echo "switch=$TF_USE_LEGACY_KERAS"',
                    env={**os.environ, "TF_USE_LEGACY_KERAS": "0"})
    assert result.returncode == 0 and "switch=0" in result.stdout, result.stderr


IMPORTS = """
import json, os, sys
before = os.environ.get("TF_USE_LEGACY_KERAS")
import tensorflow as tf
import keras
print(json.dumps([before, os.environ.get("TF_USE_LEGACY_KERAS"), keras.__name__,
                  keras.__version__.split(".")[0], keras.layers.Dense is tf.keras.layers.Dense,
                  type(tf.keras.optimizers.SGD()).__module__.split(".")[0]]))
"""


@pytest.mark.slow
def test_import_keras_is_tf_keras_keras_2():
    result = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True,
                            timeout=600, env=_env_without_the_switch())
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    if NEW_STACK:  # set as TensorFlow began to import, not at interpreter start
        assert seen == [None, "1", "tf_keras", "2", True, "tf_keras"]
    else:
        assert seen == [None, None, "keras", "2", True, "keras"]


@pytest.mark.slow
def test_keras_3_chosen_stops_horovods_keras_support_with_one_sentence():
    code = "import horovod.tensorflow.keras as hvd; print('imported')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600, env={**os.environ, "TF_USE_LEGACY_KERAS": "0"})
    if NEW_STACK:
        assert result.returncode != 0
        assert ("horovod.tensorflow.keras needs Keras 2, but TF_USE_LEGACY_KERAS=0 makes tf.keras "
                "Keras 3 in TensorFlow 2.") in result.stderr, result.stderr[-3000:]
        assert "unset TF_USE_LEGACY_KERAS" in result.stderr
    else:  # TensorFlow 2.15's Keras is Keras 2 whatever the variable says
        assert result.returncode == 0 and "imported" in result.stdout, result.stderr[-3000:]
