"""An instance whose one replica is the host CPU reads its dataset in place (no MultiDeviceIterator)
and reads the same elements, every way a program reads them; other placements keep TensorFlow's
device feeding."""
import json

import pytest
import tensorflow as tf

from conftest import poprun
from popdist_launcher.strategies import _host_input

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
PER_REPLICA = tf.distribute.InputOptions(
    experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)


@pytest.mark.parametrize("devices, options, expected", [
    ((CPU,), None, True),
    (("/device:CPU:0",), tf.distribute.InputOptions(), True),
    ((CPU, "/job:localhost/replica:0/task:0/device:CPU:1"), None, False),
    (("/job:localhost/replica:0/task:0/device:GPU:0",), None, False),
    ((CPU,), PER_REPLICA, False),
])
def test_which_instances_read_in_place(devices, options, expected):
    assert _host_input.reads_in_place(devices, options) is expected


def test_a_tf1_graph_keeps_tensorflows_iterators():
    with tf.Graph().as_default():
        assert not _host_input.reads_in_place((CPU,), None)


def test_in_place_options_keep_the_buffer_size():
    dataset = tf.data.Dataset.range(4)
    options = tf.distribute.InputOptions(experimental_per_replica_buffer_size=3)
    prefetched, direct = _host_input.for_dataset((CPU,), dataset, options)
    assert direct.experimental_per_replica_buffer_size == 3
    assert not direct.experimental_fetch_to_device
    assert list(prefetched.as_numpy_iterator()) == [0, 1, 2, 3]
    unchanged = _host_input.for_dataset((CPU,), dataset, PER_REPLICA)
    assert unchanged == (dataset, PER_REPLICA)


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    """A function from a strategy to its -np 1 job's result and folder: one job reads through
    PopDistStrategy and IPUHorovodStrategy one after the other, IPUMultiWorkerStrategy has a job
    of its own (it makes the process a worker of TensorFlow's cluster). Each job starts when one
    of its strategies is first asked for."""
    launches = {}

    def job(strategy):
        read = ("multi-worker",) if strategy == "multi-worker" else ("popdist", "horovod")
        if read not in launches:
            out = tmp_path_factory.mktemp("one-replica")
            launches[read] = out, poprun("-np", "1", "tests/workers/host_input.py", ",".join(read),
                                         str(out), timeout=300)
        return launches[read]
    return job


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["popdist", "horovod", "multi-worker"])
def test_one_cpu_replica_reads_the_datasets_elements_in_place(one_replica, strategy):
    out, result = one_replica(strategy)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads((out / f"input-{strategy}.json").read_text())
    plain = got["plain"]
    assert plain == [[[0, 1, 2, 3]], [[4, 5, 6, 7]], [[8, 9]]]
    for way in ("distribute_dataset", "from_function"):
        assert got[way]["python_loop"] == plain
        assert got[way]["optional_loop"] == plain
        assert got[way]["function_next"] == plain[:2]
        assert got[way]["iterators"] == ["OwnedIterator"]


@pytest.mark.slow
def test_two_local_replicas_keep_tensorflows_device_feeding(tmp_path):
    result = poprun("-np", "1", "--num-replicas", "2", "tests/workers/host_input.py", "popdist",
                    str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads((tmp_path / "input-popdist.json").read_text())
    for way in ("distribute_dataset", "from_function"):
        assert got[way]["iterators"] == ["OwnedMultiDeviceIterator"]
        # each step's two local replicas take consecutive elements (Graphcore's infeed order)
        assert [sum(step, []) for step in got[way]["python_loop"]][0] == list(range(8))
