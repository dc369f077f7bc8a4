"""``tensorflow.python.keras`` in IPU programs is the Keras 2 that tf.keras is, module by module
(popdist_launcher/compat/tf_python_keras.py), as on Graphcore's SDKs: a Sequential from
``tensorflow.python.keras.engine.sequential`` compiles with a tf.keras optimizer and trains like
tf.keras's own, under poprun-lite as in one process; a program without Graphcore's names keeps
TensorFlow's own old copy."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import KERAS_2, poprun

PROGRAM = Path(__file__).parent / "programs" / "tf_python_keras.py"


def check(result) -> None:
    assert result["same_objects"] == dict.fromkeys(result["same_objects"], True)
    assert len(result["same_objects"]) == 9
    for got, want in zip(result["internal"], result["public"]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(result["internal_loss"], result["public_loss"], rtol=1e-6)
    assert result["internal_loss"][-1] < 0.5 * result["internal_loss"][0]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    result = subprocess.run([sys.executable, str(PROGRAM), str(out)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "tf-python-keras-0.json").read_text())


def test_internal_keras_names_mix_with_tf_keras_as_one_process(one_process):
    check(one_process)


@pytest.mark.slow
def test_internal_keras_names_mix_with_tf_keras_under_poprun_lite(tmp_path, one_process):
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"tf-python-keras-{i}.json").read_text()) for i in range(2)]
    for run in runs:
        check(run)
        for got, want in zip(run["internal"], one_process["internal"]):  # the same global batch
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert runs[0]["internal"] == runs[1]["internal"]


MODULES = ("tensorflow.python.keras", "tensorflow.python.keras.engine.sequential",
           "tensorflow.python.keras.engine.training", "tensorflow.python.keras.layers",
           "tensorflow.python.keras.optimizers", "tensorflow.python.keras.losses",
           "tensorflow.python.keras.callbacks", "tensorflow.python.keras.backend",
           "tensorflow.python.keras.optimizer_v2.adam",
           "tensorflow.python.keras.optimizer_v2.learning_rate_schedule",
           "tensorflow.python.keras.layers.merge", "tensorflow.python.keras.saving.hdf5_format")
NAMES = """
import importlib, json, tensorflow as tf
{ipu}
print(json.dumps([importlib.import_module(m).__name__ for m in {modules!r}]))
"""


def imported_as(ipu_import: str) -> list:
    code = NAMES.format(ipu=ipu_import, modules=MODULES)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_each_module_is_keras_2s_in_an_ipu_program_and_tensorflows_elsewhere():
    assert imported_as("from tensorflow.python import ipu") == [
        f"{KERAS_2}.src", f"{KERAS_2}.src.engine.sequential", f"{KERAS_2}.src.engine.training",
        f"{KERAS_2}.src.layers", f"{KERAS_2}.src.optimizers", f"{KERAS_2}.src.losses",
        f"{KERAS_2}.src.callbacks", f"{KERAS_2}.src.backend",
        f"{KERAS_2}.src.optimizers.legacy.adam",
        f"{KERAS_2}.src.optimizers.schedules.learning_rate_schedule",
        f"{KERAS_2}.src.layers.merging", f"{KERAS_2}.src.saving.legacy.hdf5_format"]
    assert imported_as("") == list(MODULES)  # TensorFlow's own copy, untouched
