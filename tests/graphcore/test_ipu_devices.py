"""IPU devices as Graphcore's TensorFlow lists and names them (type ``IPU``), before and after
configure_ipu_system, with the numbers computed on the local devices standing for the IPUs and
checked against NumPy; as one process and under poprun-lite -np 2 (2 replicas per instance).
The names of what runs there: TF1 graphs, eager code, and the variables, slots and results of
IPUStrategy, PopDistStrategy, IPUHorovodStrategy and IPUMultiWorkerStrategy, as Graphcore's
strategy tests assert them."""
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
    # standing for it; so does an eager tensor computed there
    assert got["op_device"] == got["tensor_device"] == f"/device:IPU:{last}"
    assert got["op_device_type"] == "IPU"
    assert got["eager_device"] == LOGICAL.format(last)
    reference = got["numpy"]
    np.testing.assert_allclose(got["eager"], reference["matmul"], rtol=1e-6)
    np.testing.assert_allclose(got["function"], reference["relu"], rtol=1e-6)
    # IPUStrategy.run returns replica 0's sum, as Graphcore's
    np.testing.assert_allclose(got["strategy"], [reference["sum"]], rtol=1e-5)


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


NAMES_TF2 = Path(__file__).parent / "programs" / "ipu_device_names_tf2.py"
IPU, CPU = LOGICAL, "/job:localhost/replica:0/task:0/device:CPU:{}"


def check_names_tf2(got):
    rng = np.random.default_rng(0)
    x, w, y = (rng.normal(size=shape).astype("float32") for shape in ((4, 3), (3, 2), (4, 2)))
    instances, instance = got["instances"], got["instance"]
    # eager code under tf.device("/device:IPU:1"), as Graphcore's TensorFlow names it; a host
    # scope inside it and code outside it keep the CPU
    eager = got["eager"]
    for made_on_ipu in ("product", "constant", "variable", "handle", "function"):
        assert eager[made_on_ipu] == IPU.format(1), made_on_ipu
    assert eager["host"] == eager["outside"] == CPU.format(0)
    # the names placed again, numbers as NumPy's
    assert got["again_device"] == IPU.format(1)
    np.testing.assert_allclose(got["product"], x @ w, rtol=1e-5)
    np.testing.assert_allclose(got["again"], 2 * (x @ w), rtol=1e-5)
    np.testing.assert_allclose(got["doubled"], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(got["variable"], w + 1, rtol=1e-6)
    # IPUStrategy over 2 local IPUs (ipu_strategy_test: the variable on .../device:IPU:0)
    replicated = got["ipu_strategy"]
    assert replicated["variable"] == IPU.format(0)
    assert replicated["components"] == [IPU.format(0), IPU.format(1)]
    # run returns replica 0's result (as Graphcore's executor reads it back), read as IPU 0;
    # a tf.function's result too
    assert replicated["results"] == replicated["function_results"] == [IPU.format(0)]
    # the optimizer's mirrored variables (iterations, momentum) read as their first replica's
    assert replicated["optimizer"] == [IPU.format(0)] * 2
    assert replicated["keras_kernel"] == IPU.format(0)
    np.testing.assert_allclose(replicated["predict"], x @ w, rtol=1e-5)
    for value in replicated["values"]:
        np.testing.assert_allclose(value, x @ w, rtol=1e-5)
    # one SGD step, gradients summed over the 2 replicas; restored from its checkpoint
    gradient = 2 / y.size * x.T @ (x @ w - y)
    np.testing.assert_allclose(replicated["trained"], w - 0.1 * 2 * gradient, rtol=1e-5)
    for restored in replicated["restored"]:
        np.testing.assert_allclose(restored, replicated["trained"], rtol=1e-6)
    one = got["ipu1_strategy"]  # IPUStrategyV1("/device:IPU:1")
    assert one["variable"] == one["result"] == IPU.format(1) and one["value"] == 6.0
    # PopDistStrategy (popdist_strategy_test: v.device ends with /device:IPU:0, instance 0's
    # initial value everywhere); the sum of v * (instance + 1) over every replica
    popdist = got["popdist"]
    local = popdist["local_replicas"]
    assert popdist["variable"] == IPU.format(0) and popdist["value"] == 1.0
    assert popdist["results"] == [IPU.format(r) for r in range(local)]
    assert popdist["sum"] == local * sum(i + 1 for i in range(instances)), instance
    # IPUHorovodStrategy(variables_on_host=True): the variable stays on the host
    on_host = got["horovod_on_host"]
    assert on_host["variable"] == CPU.format(0)
    assert on_host["results"] == [IPU.format(r) for r in range(local)]


@pytest.mark.slow
def test_tf2_device_names_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(NAMES_TF2), str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads((tmp_path / "device-names-tf2-0.json").read_text())
    assert got["instances"] == 1 and got["popdist"]["local_replicas"] == 2
    check_names_tf2(got)


@pytest.mark.slow
def test_tf2_device_names_under_poprun(tmp_path):
    result = poprun("-np", "2", "--num-replicas", "4", str(NAMES_TF2), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(2):  # 2 instances of 2 replicas each
        got = json.loads((tmp_path / f"device-names-tf2-{index}.json").read_text())
        assert got["instances"] == 2 and got["popdist"]["local_replicas"] == 2
        check_names_tf2(got)


NAMES_MULTI_WORKER = Path(__file__).parent / "programs" / "ipu_device_names_multi_worker.py"


@pytest.mark.slow
@pytest.mark.parametrize("instances", [1, 2])
def test_multi_worker_device_names(tmp_path, instances):
    result = poprun("-np", str(instances), str(NAMES_MULTI_WORKER), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in range(instances):
        got = json.loads((tmp_path / f"device-names-mw-{index}.json").read_text())
        worker = f"/job:worker/replica:0/task:{index}/device:"
        # Graphcore's _test_variables_on_ipu / _test_variables_on_host / _test_all_reduce
        on_ipu, on_host = got["ipu"], got["host"]
        assert on_ipu["variable"] == on_ipu["replica_variable"] == worker + "IPU:0"
        assert on_host["variable"] == on_host["replica_variable"] == worker + "CPU:0"
        for run in (on_ipu, on_host):
            assert run["op"] == run["result"] == worker + "IPU:0"
            assert run["sum_device"] == worker + "CPU:0"
            # instance 0's initial value (2.0) on every worker's replica, summed over the workers
            assert run["sum"] == 2.0 * instances
