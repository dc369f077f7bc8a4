"""Conformance with Graphcore's host_collective_ops_test.py (graphcore/tensorflow
r2.6/sdk-release-3.4, tensorflow/python/ipu/distributed/): ``host_collective_ops`` between two real
instances under ``poprun-lite -np 2``, with Graphcore's numbers (programs/host_collectives.py
writes each instance's results)."""
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

pytestmark = pytest.mark.slow
PROGRAM = Path(__file__).parent / "programs" / "host_collectives.py"
N = 2
DTYPES = ("float16", "float32", "int8", "int16", "int32", "int64")
LAYOUTS = "Tensor layouts did not match on all instances"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_collectives")
    result = poprun("-np", str(N), str(PROGRAM), str(out), timeout=400)
    assert result.returncode == 0, result.stderr[-6000:]
    return [json.loads((out / f"host-{i}.json").read_text()) for i in range(N)]


def typed(dtype, values):
    """[dtype name, values] as the program writes a result."""
    return [dtype, np.asarray(values, dtype=dtype).tolist()]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_dtype_gathers_reduces_and_broadcasts(runs, mode, dtype):
    # test_allgather, test_allreduce_sum, test_allreduce_mean, test_broadcast: instance i
    # passes the scalar i (42 from instance 0 to broadcast); MEAN is dtype(sum / N).
    total = sum(range(N))
    for got in runs:
        results = got[mode]
        assert results[f"allgather/{dtype}"] == typed(dtype, list(range(N)))
        assert results[f"allreduce_sum/{dtype}"] == typed(dtype, total)
        mean = np.dtype(dtype).type(total / N)
        assert results[f"allreduce_mean/{dtype}"] == typed(dtype, mean)
        assert results[f"broadcast/{dtype}"] == typed(dtype, 42)
    if dtype.startswith("int"):
        assert runs[0][mode][f"allreduce_mean/{dtype}"][1] == 0  # 1 / 2, toward zero
    else:
        assert runs[0][mode][f"allreduce_mean/{dtype}"][1] == 0.5


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_allgather_stacks_and_broadcast_takes_its_root(runs, mode):
    stacked = typed("int32", [[i, i] for i in range(N)])
    for got in runs:
        assert got[mode]["allgather_vector"] == stacked  # [N, 2], not Horovod's [2 N]
        assert got[mode]["broadcast_root_1"] == typed("float32", [8.0])  # instance 1's 1 + 7
        # ipu.distributed's allgather is the stacking one in TF2 programs (SDK 3.1+);
        # ipu.horovod's is Horovod's concatenation, as in the SDKs that had it.
        assert got[mode]["distributed_allgather"] == stacked
        assert got[mode]["horovod_allgather"] == typed("int32", [i for i in range(N) for _ in "ab"])


def test_ipu_distributed_allgather_concatenates_in_a_tf1_graph(runs):
    for got in runs:
        assert got["tf1_graph_distributed_allgather"] == typed(
            "int32", [i for i in range(N) for _ in "ab"])


def test_named_tensors_pair_by_name_in_any_order(runs):
    # test_all_allgather_different_order, test_allreduce_different_order,
    # test_broadcast_different_order: even instances call x then y, odd ones y then x.
    total = sum(range(N))
    want = {
        "allgather": (typed("float32", list(range(N))), typed("int32", [[i, i] for i in range(N)]),
                      ["PopDistAllGather_x_0", "PopDistAllGather_y_0"]),
        "allreduce": (typed("float32", total), typed("int32", [total, total]),
                      ["PopDistAllReduce_x_0", "PopDistAllReduce_y_0"]),
        "broadcast": (typed("float32", 42), typed("int32", [42, 42]),
                      ["PopDistBroadcast_x_0", "PopDistBroadcast_y_0"]),
    }
    for got in runs:
        for kind, (x, y, names) in want.items():
            assert got["different_order"][kind] == {"x": x, "y": y, "op_names": names}, kind
        # tensor_name names the collective (two constants both called "Const").
        assert got["named"] == [typed("float32", N + total), typed("float32", 10.0 * total)]
        assert got["named_op_names"] == ["first", "second"]


@pytest.mark.parametrize("kind", ["allgather", "allreduce", "broadcast"])
@pytest.mark.parametrize("mismatch", ["dtype", "shape"])
def test_instances_that_disagree_on_the_layout_get_unknown_error(runs, kind, mismatch):
    # test_*_different_dtype (float32 / int32), test_*_different_shape (scalar / [2]).
    for got in runs:
        error = got["mismatch"][f"{kind}_{mismatch}"]
        assert error is not None and error["type"] == "UnknownError", error
        assert LAYOUTS in error["message"], error
        assert got["after_mismatch"] == typed("float32", 2.0 * N)  # the collectives go on
