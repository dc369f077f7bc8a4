"""``tensorflow.contrib`` as TensorFlow 1.15 (Graphcore's TF1 SDKs) had it, for the parts
Graphcore's applications use: ``layers``' initializers drawn as TF 1.15's contrib documents them
(checked against the formulas), ``compiler.xla.compile``, ``data.AUTOTUNE``, ``framework``'s
checkpoint functions, ``rnn`` cells; any other part fails with one sentence. ``tf.contrib``
exists under --tf1 only. As one process and under poprun-lite -np 2 --tf1."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import poprun

PROGRAM = str(Path(__file__).parent / "programs" / "tf_contrib.py")
SENTENCE = "was removed in TensorFlow 2 and is not provided here"


def check(got, index):
    assert got["eager"] is False and got["autotune"] and got["lstm"]
    # Xavier uniform: limit sqrt(6 / (fan_in + fan_out)), receptive field 3 x 3 in both fans
    limit = math.sqrt(6 / (9 * 16 + 9 * 32))
    a = got["xavier_uniform"]
    assert -limit <= a["min"] < -0.98 * limit and 0.98 * limit < a["max"] <= limit
    assert abs(a["std"] - limit / math.sqrt(3)) < 0.03 * limit
    # normal: stddev sqrt(1.3 / n), truncated at 2 stddev (whose std is 0.8796 stddev)
    for name, n in (("xavier_normal", (200 + 300) / 2), ("he_normal", 400 / 2.0)):
        stddev = math.sqrt(1.3 / n)
        v = got[name]
        assert -2 * stddev <= v["min"] and v["max"] <= 2 * stddev, name
        assert abs(v["std"] - 0.8796 * stddev) < 0.03 * stddev, name
        assert abs(v["mean"]) < 0.02 * stddev, name
    f16 = got["xavier_float16"]
    assert f16["dtype"] == "float16" and f16["max"] <= math.sqrt(6 / 120) * 1.001
    assert got["xla"] == 4 * 3.0 * (index + 1)
    assert got["checkpoint"] == [["w", [2, 1]]] and got["load"] == [1.0, 2.0]
    kind, message = got["import tensorflow.contrib.slim"]
    assert kind == "ModuleNotFoundError" and message.startswith("tensorflow.contrib, beyond")
    assert SENTENCE in message
    kind, message = got["tf.contrib.slim"]
    assert kind == "AttributeError" and message.startswith("tensorflow.contrib.slim " + SENTENCE)


def test_one_process(tmp_path):
    done = subprocess.run([sys.executable, PROGRAM, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "POPDIST_TF1": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    check(json.loads((tmp_path / "contrib-0.json").read_text()), 0)


def test_two_instances(tmp_path):
    done = poprun("-np", "2", "--tf1", PROGRAM, str(tmp_path), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    for i in range(2):
        check(json.loads((tmp_path / f"contrib-{i}.json").read_text()), i)


def test_without_tf1_tf_has_no_contrib_attribute_but_the_module_imports():
    code = ("import tensorflow as tf; print(hasattr(tf, 'contrib'), "
            "hasattr(tf.compat.v1, 'contrib')); from tensorflow.contrib import layers; "
            "print(callable(layers.xavier_initializer))")
    env = {k: v for k, v in os.environ.items() if k != "POPDIST_TF1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "False", "True"]


def test_a_part_not_provided_says_so_in_one_sentence():
    import tensorflow  # noqa: F401 (the site hook answers with TensorFlow)
    with pytest.raises(ModuleNotFoundError, match=SENTENCE):
        exec("import tensorflow.contrib.slim", {})
    import tensorflow.contrib as contrib
    with pytest.raises(AttributeError, match=f"^tensorflow.contrib.slim {SENTENCE}"):
        contrib.slim  # noqa: B018
