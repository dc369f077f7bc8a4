"""IPU devices as Graphcore's TensorFlow lists and names them (type ``IPU``), before and after
configure_ipu_system, with the numbers computed on the local devices standing for the IPUs and
checked against NumPy; as one process and under poprun-lite -np 2 (2 replicas per instance)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAM = Path(__file__).parent / "programs" / "ipu_devices.py"
LOGICAL = "/job:localhost/replica:0/task:0/device:IPU:{}"


def check(got, before, after):
    assert got["physical_before"] == [[f"/physical_device:IPU:{i}", "IPU"] for i in range(before)]
    assert got["logical_before"] == [[LOGICAL.format(i), "IPU"] for i in range(before)]
    assert got["experimental_before"] == got["logical_before"]
    assert got["physical_after"] == [[f"/physical_device:IPU:{i}", "IPU"] for i in range(after)]
    assert got["logical_after"] == [[LOGICAL.format(i), "IPU"] for i in range(after)]
    assert got["visible"] == got["physical_after"]
    assert got["details"] == {"device_name": "IPU"}
    # Listing the IPUs initialised nothing: configure_ipu_system still made one CPU per replica.
    assert got["cpu_logical"] == after and got["gpu"] == []
    last = after - 1
    # ops placed on an IPU name it (as on Graphcore's TensorFlow) and run on the local device
    # standing for it; an eager tensor names the device it ran on
    assert got["op_device"] == got["tensor_device"] == f"/device:IPU:{last}"
    assert got["op_device_type"] == "IPU"
    assert got["eager_device"] == f"/job:localhost/replica:0/task:0/device:CPU:{last}"
    reference = got["numpy"]
    np.testing.assert_allclose(got["eager"], reference["matmul"], rtol=1e-6)
    np.testing.assert_allclose(got["function"], reference["relu"], rtol=1e-6)
    np.testing.assert_allclose(got["strategy"], [reference["sum"]] * after, rtol=1e-5)


@pytest.mark.slow
def test_ipu_devices_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    # a plain process has 1 IPU until the program selects 2
    check(json.loads((tmp_path / "ipu-devices-0.json").read_text()), before=1, after=2)


@pytest.mark.slow
def test_ipu_devices_under_poprun(tmp_path):
    result = poprun("-np", "2", "--num-replicas", "4", str(PROGRAM), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):  # each instance sees the 2 IPUs of its 2 replicas, as on an IPU-POD
        check(json.loads((tmp_path / f"ipu-devices-{index}.json").read_text()), before=2, after=2)


NAMES_TF1 = Path(__file__).parent / "programs" / "ipu_device_names_tf1.py"


def check_names_tf1(got):
    reference, cpu = got["reference"], got["cpu"]
    np.testing.assert_allclose(reference["losses"][0], got["numpy_first_loss"], rtol=1e-6)
    # stock TensorFlow's placement of the graph on /device:CPU:0, with the IPU's name
    on_ipu = {name: device.replace("/device:CPU:0", "/device:IPU:0")
              for name, device in cpu["devices"].items()}
    assert sum(d == "/device:IPU:0" for d in on_ipu.values()) > len(on_ipu) // 2
    for placed in ("ipu_scope", "tf_device"):
        run = got[placed]
        # as Graphcore's TF1 tests read them: the ops and their outputs name the IPU, and so do
        # the gradient ops colocated with them, in the while loop too ...
        assert run["h_device"] == run["loss_device"] == "/device:IPU:0", placed
        assert run["devices"] == on_ipu, placed
        assert any(name.startswith("gradients/") and "while" in name and device
                   for name, device in run["devices"].items())
        # ... while the runtime places every op where stock TensorFlow places it on the CPU
        assert run["graph_def_devices"] == cpu["graph_def_devices"], placed
        assert run["losses"] == reference["losses"] and run["weights"] == reference["weights"]


@pytest.mark.slow
def test_tf1_device_names_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(NAMES_TF1), str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    check_names_tf1(json.loads((tmp_path / "device-names-0.json").read_text()))


@pytest.mark.slow
def test_tf1_device_names_under_poprun(tmp_path):
    result = poprun("-np", "2", str(NAMES_TF1), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):
        check_names_tf1(json.loads((tmp_path / f"device-names-{index}.json").read_text()))
