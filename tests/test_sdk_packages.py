"""What Graphcore's SDKs brought beside TensorFlow is on both stacks (docs/install.md): TensorBoard
(every kind of summary, read back with TensorBoard's own reader, and the ``tensorboard``
command) and the small packages the SDK's TensorFlow wheels required."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

ROOT = Path(__file__).resolve().parents[1]
SUMMARIES = ROOT / "tests" / "graphcore" / "programs" / "summaries.py"


def read_events(folder: Path):
    """Every event file under ``folder`` through TensorBoard's reader: {tag: (kind, events)}."""
    from tensorboard.backend.event_processing import event_accumulator
    found = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = event_accumulator.EventAccumulator(str(events), size_guidance={"tensors": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["tensors"]:
            tensors = accumulator.Tensors(tag)
            plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
            found[f"{events.parent.relative_to(folder)}/{tag}"] = (plugin, tensors)
    return found


def check_summaries(instance: Path) -> None:
    import tensorflow as tf
    events = read_events(instance)
    kinds = {tag: plugin for tag, (plugin, _) in events.items()}
    assert kinds["direct/loss"] == "scalars"
    assert kinds["direct/inputs"] == "images"
    assert kinds["direct/weights"] == "histograms"
    assert kinds["direct/note"] == "text"
    assert kinds["direct/tone"] == "audio"
    losses = [float(tf.make_ndarray(e.tensor_proto)) for e in events["direct/loss"][1]]
    assert losses == pytest.approx([1.0, 0.5, 1.0 / 3.0])
    (image_event,) = events["direct/inputs"][1]
    width, height, *pngs = tf.make_ndarray(image_event.tensor_proto)
    assert (int(width), int(height), len(pngs)) == (6, 4, 2)
    decoded = tf.io.decode_png(pngs[1]).numpy()
    images = np.linspace(0.0, 1.0, 2 * 4 * 6 * 3).reshape(2, 4, 6, 3)  # what the program wrote
    np.testing.assert_allclose(decoded, images[1] * 255, atol=1)
    (note,) = events["direct/note"][1]
    assert tf.make_ndarray(note.tensor_proto).item() == b"written by an IPU program"
    # Keras' callback: epoch losses, weight histograms and the kernels as images.
    assert any(tag.startswith("keras/train/") and plugin == "histograms"
               for tag, plugin in kinds.items())
    assert any(tag.startswith("keras/train/") and plugin == "images"
               for tag, plugin in kinds.items())
    epoch_loss = events["keras/train/epoch_loss"][1]
    assert [e.step for e in epoch_loss] == [0, 1]


@pytest.mark.slow
def test_every_kind_of_summary_under_poprun_lite(tmp_path):
    result = poprun("-np", "2", str(SUMMARIES), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check_summaries(tmp_path / f"instance-{index}")


def test_every_kind_of_summary_as_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(SUMMARIES), str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    check_summaries(tmp_path / "instance-0")


def pinned(package: str) -> str:
    requirements = "requirements-tf2.15.txt" if _tensorflow_2_15() else "requirements.txt"
    for line in (ROOT / requirements).read_text().splitlines():
        name, _, version = line.partition(";")[0].strip().partition("==")
        if name.lower().replace("_", "-") == package:
            return version
    raise AssertionError(f"{package} is not pinned in {requirements}")


def _tensorflow_2_15() -> bool:
    from importlib.metadata import version
    return version("tensorflow-cpu").startswith("2.15")


def test_the_tensorboard_command_is_the_pinned_tensorboard(tmp_path):
    tensorboard = Path(sys.executable).parent / "tensorboard"
    version = subprocess.run([str(tensorboard), "--version_tb"], capture_output=True, text=True,
                             timeout=120)
    assert version.returncode == 0, version.stderr[-2000:]
    assert version.stdout.split()[-1] == pinned("tensorboard")
    # --inspect reads a log folder as the command line user would.
    subprocess.run([sys.executable, str(SUMMARIES), str(tmp_path)], capture_output=True,
                   timeout=600, check=True)
    inspect = subprocess.run([str(tensorboard), "--inspect", "--logdir", str(tmp_path)],
                             capture_output=True, text=True, timeout=300)
    assert inspect.returncode == 0, inspect.stderr[-2000:]
    assert "tensor" in inspect.stdout and "instance-0/direct" in inspect.stdout


def test_the_packages_graphcores_tensorflow_wheels_required_work():
    # networkx and astor (the SDK's TensorFlow 1.15 wheel), keras_preprocessing (both lines).
    code = """
import ast, json, astor, networkx as nx, numpy as np
from tensorflow.python import ipu  # an IPU program: keras_preprocessing needs NumPy 1.x names
from keras_preprocessing.image import ImageDataGenerator
from keras_preprocessing.sequence import pad_sequences
flow = ImageDataGenerator(horizontal_flip=True).flow(np.arange(8.0).reshape(1, 2, 4, 1),
                                                     batch_size=1, shuffle=False)
print(json.dumps([nx.shortest_path_length(nx.path_graph(5), 0, 4),
                  pad_sequences([[1, 2], [3]], maxlen=3).tolist(),
                  astor.to_source(ast.parse("x=1+2")).strip(), list(next(flow).shape)]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import json
    assert json.loads(result.stdout.splitlines()[-1]) == [
        4, [[0, 1, 2], [0, 0, 3]], "x = 1 + 2", [1, 2, 4, 1]]
