"""tf.data statistics (TF 1.15 / 2.x names that TF 2.15 removed) are really collected and end up
in the summaries the program asks for: element i holds i % 4 + 1 float32 values, so the bytes
histogram must count 12 elements of NumPy's total size; checked as one process (eager and TF 1
graph mode) and under poprun-lite -np 2."""
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAM = Path(__file__).parent / "programs" / "tf_data_stats.py"
ELEMENTS = 12
TF_VERSION = tuple(int(p) for p in importlib.metadata.version("tensorflow-cpu").split(".")[:2])
VALUES = [[float(i)] * (i % 4 + 1) for i in range(ELEMENTS)]
BYTES = float(sum(np.full(i % 4 + 1, i, np.float32).nbytes for i in range(ELEMENTS)))


def check_histograms(histograms, prefix):
    assert histograms[prefix + "record_bytes"]["num"] == ELEMENTS
    assert histograms[prefix + "record_bytes"]["sum"] == BYTES
    assert histograms[prefix + "record_latency"]["num"] == ELEMENTS
    assert histograms[prefix + "record_latency"]["sum"] > 0
    # On TensorFlow 2.15 the aggregator also gets tf.data's own per-transformation execution
    # times; TensorFlow 2.16+'s runtime no longer sends them.
    timed = [tag for tag in histograms if tag.startswith(prefix) and tag.endswith("execution_time")]
    if TF_VERSION < (2, 16):
        assert len(timed) == 1 and histograms[timed[0]]["num"] == ELEMENTS
    else:
        assert timed == []


def check(got):
    assert got["values"] == VALUES
    if got["mode"] == "eager":
        check_histograms(got["get_summary"], "train::")
        check_histograms(got["writer"], "pipeline::")
    else:
        check_histograms(got["file_writer"], "")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "tf1"])
def test_tf_data_stats_one_process(tmp_path, mode):
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path), mode],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    check(json.loads((tmp_path / "tf-data-stats-0.json").read_text()))


@pytest.mark.slow
def test_tf_data_stats_under_poprun(tmp_path):
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check(json.loads((tmp_path / f"tf-data-stats-{index}.json").read_text()))


def test_removed_tf_data_settings_have_their_meaning():
    import tensorflow as tf
    options = tf.data.Options()
    options.experimental_optimization.autotune = False  # TF 2.6's name of options.autotune
    options.experimental_optimization.autotune_cpu_budget = 3
    options.experimental_optimization.map_vectorization.enabled = True  # no such rewrite now
    options.experimental_optimization.hoist_random_uniform = True
    dataset = tf.data.Dataset.range(10).with_options(options)
    assert dataset.options().autotune.enabled is False
    assert dataset.options().autotune.cpu_budget == 3
    assert list(dataset.as_numpy_iterator()) == list(range(10))
    sharded = dataset.apply(tf.data.experimental.filter_for_shard(3, 1))
    assert list(sharded.as_numpy_iterator()) == [1, 4, 7]
    with pytest.raises(TypeError, match="needs a tf.data.experimental.StatsAggregator"):
        tf.data.experimental.set_stats_aggregator("not an aggregator")
