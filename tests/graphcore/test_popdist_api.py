"""PopDist's whole Python API (docs/popdist-api-coverage.md): every name as a PopDist program
uses it, as one process and under poprun-lite -np 2 on both backends (local: Horovod over Gloo;
mpi: Open MPI's mpirun), in eager and TensorFlow 1 graph mode; ``synchronize()`` is a barrier
(no instance leaves before every instance arrived) and, when an instance never arrives, the
waiting one fails with the collectives' stall error naming it."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import poprun

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).parent / "programs" / "popdist_api.py"


def documented_names():
    text = (ROOT / "docs" / "popdist-api-coverage.md").read_text()
    return set(re.findall(r"^\| `popdist\.([A-Za-z_.]+)`", text, flags=re.MULTILINE))


def test_every_documented_name_is_provided():
    import popdist
    import popdist.tensorflow
    provided = set(popdist.__all__) | {f"tensorflow.{n}" for n in popdist.tensorflow.__all__}
    assert documented_names() == provided
    for name in provided:
        module = popdist.tensorflow if name.startswith("tensorflow.") else popdist
        assert callable(getattr(module, name.rpartition(".")[2]))


def check_instance(got, index, count):
    values = got["values"]
    assert values == {
        "isPopdistEnvSet": count > 1, "getNumInstances": count, "getInstanceIndex": index,
        "getLocalInstanceIndex": index, "getNumTotalReplicas": count, "getNumLocalReplicas": 1,
        "getReplicaIndexOffset": index, "getNumIpusPerReplica": 1, "getDeviceId": index,
        "getDeviceId(ipusPerReplica=1)": index, "checkNumIpusPerReplica(own)": True,
        "checkNumIpusPerReplica(other)": False}
    assert got["backend_before_init"] is False and got["backend_after_init"] is True
    assert got["backend_after_finalize"] is False
    assert got["execute_on_0"] == (0 if index == 0 else None)
    assert got["execute_on_missing"] == (f"execute_on_instances: instance(s) [{count}] do not "
                                         f"exist; this job has instances 0 .. {count - 1}.")
    assert got["set_ipu_config"] == {"process_count": count, "process_index": index,
                                     "auto_select_ipus": 1}
    assert set(got["names"]) == documented_names()


def check_barriers(runs):
    """No instance leaves a barrier before the last instance arrived at it."""
    for phase in range(3):
        last_arrival = max(run["phases"][phase]["arrived"] for run in runs)
        for run in runs:
            assert run["phases"][phase]["left"] >= last_arrival, (phase, run["values"])
    last_arrival = max(run["execute_on_all"]["arrived"] for run in runs)
    assert all(run["execute_on_all"]["left"] >= last_arrival for run in runs)


@pytest.mark.slow
def test_popdist_api_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads((tmp_path / "popdist-0.json").read_text())
    check_instance(got, 0, 1)
    check_barriers([got])


@pytest.mark.slow
@pytest.mark.parametrize("backend,mode", [("local", ""), ("local", "tf1"), ("mpi", "")])
def test_popdist_api_under_poprun(tmp_path, backend, mode):
    result = poprun("-np", "2", "--backend", backend, str(PROGRAM), str(tmp_path),
                    *([mode] if mode else []), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"popdist-{i}.json").read_text()) for i in range(2)]
    for index, got in enumerate(runs):
        check_instance(got, index, 2)
    check_barriers(runs)
    # instance 1 spends 0.5 s longer in each phase: instance 0 waited for it at the barrier
    assert all(runs[0]["phases"][p]["left"] >= runs[1]["phases"][p]["arrived"] for p in range(3))


@pytest.mark.slow
def test_synchronize_with_a_missing_instance_fails_with_the_stall_error(tmp_path):
    env = dict(os.environ, POPRUN_COLLECTIVES_STALL_TIMEOUT="3")
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path), "stall", timeout=300, env=env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert ("collective stall on instance 0 of 2: allreduce 'popdist.synchronize'" in output), \
        output[-4000:]
    assert "stall timeout 3 s" in output
    assert not (tmp_path / "popdist-0.json").exists()


SUBSET = Path(__file__).parent / "programs" / "popdist_subset.py"


@pytest.mark.slow
@pytest.mark.parametrize("backend,mode", [("local", ""), ("local", "tf1"), ("mpi", "")])
def test_synchronize_among_a_subset_of_instances(tmp_path, backend, mode):
    """PopDist's execute_on_instances: synchronize() inside it is a barrier among its instances
    only (PopDist Python API reference); instance 2 never takes part."""
    result = poprun("-np", "3", "--backend", backend, str(SUBSET), str(tmp_path),
                    *([mode] if mode else []), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"subset-{i}.json").read_text()) for i in range(3)]
    assert runs[2]["rounds"] == [None, None] and runs[2]["saw_instance_1_pass"] is True
    for r in range(2):
        zero, one = runs[0]["rounds"][r], runs[1]["rounds"][r]
        assert zero["left"] >= one["arrived"] and one["left"] >= zero["arrived"]
    assert [run["all"] for run in runs] == [0, 1, 2]


@pytest.mark.slow
def test_a_subset_barrier_that_only_its_members_set_up_fails_with_the_stall_error(tmp_path):
    env = dict(os.environ, POPRUN_COLLECTIVES_STALL_TIMEOUT="3")
    result = poprun("-np", "3", str(SUBSET), str(tmp_path), "members-only", timeout=300, env=env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    # Instances 0 and 1 wait in the same registration: either watchdog may fire first.
    assert re.search(r"collective stall on instance [01] of 3: allgather "
                     r"'register instance group \[0, 1\]'", output), output[-4000:]
