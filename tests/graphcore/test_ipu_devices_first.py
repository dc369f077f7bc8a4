"""IPU devices from TensorFlow's import in IPU programs, as on Graphcore's TensorFlow: a program
that lists ``tf.config``'s IPU devices before it imports any Graphcore name finds the launch's
IPUs (local replicas x IPUs per replica), under poprun-lite and as one process; a program that
names no Graphcore module sees TensorFlow's own listing."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import poprun

PROGRAM = Path(__file__).parent / "programs" / "ipu_devices_first.py"


def expected(count: int) -> dict:
    logical = [[f"/job:localhost/replica:0/task:0/device:IPU:{i}", "IPU"] for i in range(count)]
    physical = [[f"/physical_device:IPU:{i}", "IPU"] for i in range(count)]
    total = float(sum(range(count * 10)))
    return {"logical": logical, "physical": physical, "total": total, "after": logical}


def test_ipu_devices_before_the_first_graphcore_import_as_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads((tmp_path / "ipu-devices-first-0.json").read_text()) == expected(1)


@pytest.mark.slow
def test_ipu_devices_before_the_first_graphcore_import_under_poprun_lite(tmp_path):
    result = poprun("-np", "2", "--num-replicas", "4", str(PROGRAM), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):  # each instance: its 2 replicas' IPUs
        got = json.loads((tmp_path / f"ipu-devices-first-{index}.json").read_text())
        assert got == expected(2)


def test_a_program_without_graphcore_names_sees_tensorflows_listing():
    code = ("import sys, tensorflow as tf; print(tf.config.list_logical_devices('IPU'), "
            "tf.config.list_physical_devices('IPU'), "
            "getattr(tf.config.list_logical_devices, '_ipu_devices', False), "
            "'popdist_launcher.ipu' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split() == ["[]", "[]", "False", "False"]
