"""Pure pieces, no processes: the launch plan, TF_CONFIG rules, the runtime accessors, ports."""
import json
import socket

import pytest

import popdist_launcher
from popdist_launcher import popdist, runtime, tf_config
from popdist_launcher.launcher.layout import ports
from popdist_launcher.launcher.layout.plan import (Host, PlanError, build_plan, distribute,
                                                   parse_exports)


def plan(n=4, replicas=None, hosts=(Host("localhost", "127.0.0.1"),)):
    return build_plan(["prog"], n, list(range(20000, 20000 + n)), ("127.0.0.1", 29999),
                      num_replicas=replicas, hosts=hosts)


def test_plan_replicas_and_offsets():
    p = plan(4, 8)
    assert [list(i.replicas) for i in p.instances] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    env = p.instance_env(3)
    assert env["POPDIST_REPLICA_INDEX_OFFSET"] == "6" and env["POPDIST_NUM_LOCAL_REPLICAS"] == "2"
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][3] == "127.0.0.1:20003"


def test_plan_rejects_bad_counts():
    with pytest.raises(PlanError, match="not divisible"):
        plan(4, 6)
    with pytest.raises(PlanError, match="at least 1"):
        plan(0)


def test_horovod_ranks_over_two_hosts():
    hosts = (Host("a", "10.0.0.1"), Host("b", "10.0.0.2"))
    p = plan(5, hosts=hosts)
    assert [i.host.name for i in p.instances] == ["a", "a", "a", "b", "b"]
    assert [(i.local_index, i.local_size) for i in p.instances] == [
        (0, 3), (1, 3), (2, 3), (0, 2), (1, 2)]
    assert [(i.cross_rank, i.cross_size) for i in p.instances] == [
        (0, 2), (0, 2), (0, 1), (1, 2), (1, 2)]
    assert distribute(3, hosts) == [hosts[0], hosts[0], hosts[1]]


def test_exports():
    assert parse_exports(["A=1", "B"], {"B": "two"}) == (("A", "1"), ("B", "two"))
    assert parse_exports(["A=x=y"], {}) == (("A", "x=y"),)
    with pytest.raises(PlanError, match="not a valid environment variable name"):
        parse_exports(["=3"], {})


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ('{"cluster": {"worker": ["a:1"]}}', 'no "task" type'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "out of range"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}',
     "not a job of the cluster"),
    ('{"cluster": {"chief": ["a:1", "b:2"]}, "task": {"type": "chief"}}', "at most one"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker"}}', "host:port"),
    ('{"cluster": {"evaluator": ["a:1", "a:2"]}, "task": {"type": "evaluator"}}', "at most one"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}', "non-negative"),
])
def test_tf_config_errors(text, words):
    with pytest.raises(tf_config.TFConfigError, match=words):
        tf_config.parse(text)


def test_tf_config_roles():
    cfg = tf_config.build(["h:1", "h:2"], 1)
    assert not cfg.is_chief and cfg.num_workers == 2 and cfg.address == "h:2"
    assert tf_config.parse(cfg.to_json()) == cfg
    chief = tf_config.parse('{"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, '
                            '"task": {"type": "worker", "index": 0}}')
    assert not chief.is_chief and chief.worker_index == 1 and chief.num_workers == 2
    evaluator = tf_config.parse('{"cluster": {"worker": ["w:1"]}, "task": {"type": "evaluator"}}')
    assert evaluator.address is None and not evaluator.is_chief
    assert tf_config.from_environ({}) is None


def test_runtime_outside_the_launcher_is_one_instance():
    ctx = runtime.init({})
    assert not ctx.launched and ctx.num_instances == 1 and ctx.num_total_replicas == 1
    assert popdist.isPopdistEnvSet() is False and popdist.getNumInstances() == 1


def test_runtime_reads_the_contract():
    env = plan(4, 8).instance_env(2)
    ctx = popdist_launcher.init(env)
    assert ctx.launched and ctx.instance_index == 2 and list(ctx.replica_indices) == [4, 5]
    assert popdist.getReplicaIndexOffset() == 4 and popdist.getNumLocalReplicas() == 2
    assert popdist.getNumTotalReplicas() == 8 and popdist.getNumIpusPerReplica() == 1
    assert popdist_launcher.local_instance_index() == 2
    runtime.init({})


def test_device_ids_are_graphcores_numbering():
    # 16 IPUs: 0-15 single IPUs, 16-23 pairs, 24-27 fours, 28-29 eights, 30 all sixteen
    assert [runtime.device_id(n, 0, 16) for n in (1, 2, 4, 8, 16)] == [0, 16, 24, 28, 30]
    assert runtime.device_id(8, 1, 16) == 29 and runtime.device_id(2, 1, 4) == 5
    assert [runtime.device_ipus(d, 16) for d in (0, 15, 16, 23, 24, 27, 28, 29, 30)] == \
        [1, 1, 2, 2, 4, 4, 8, 8, 16]
    with pytest.raises(ValueError, match="device id 31 is past the last device"):
        runtime.device_ipus(31, 16)


def test_an_instance_selects_its_replicas_by_its_device_id():
    # poprun-lite -np 2 --num-replicas 8 --ipus-per-replica 2: 16 IPUs, 8 per instance
    env = plan(2, 8).instance_env(1)
    env.update(POPDIST_NUM_IPUS_PER_REPLICA="2")
    runtime.init(env)
    try:
        assert popdist.getDeviceId() == 29  # the second device of 8 IPUs
        assert popdist.getDeviceId(ipusPerReplica=1) == 25  # of 4 IPUs, as Graphcore's
        assert runtime.selected_ipus(29) == 8  # select_ipus = [getDeviceId()]: its replicas
        assert runtime.selected_ipus(3) == 1 and runtime.selected_ipus(30) == 16
    finally:
        runtime.init({})
    assert runtime.selected_ipus(5) == 1  # outside a launch: one IPU per id


@pytest.mark.parametrize("change, words", [
    ({"POPDIST_NUM_TOTAL_REPLICAS": "eight"}, "not an integer"),
    ({"POPDIST_INSTANCE_INDEX": "9"}, "out of range"),
    ({"POPDIST_REPLICA_INDEX_OFFSET": "1"}, "does not match instance"),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "7"}, "is not POPDIST_NUM_LOCAL_REPLICAS"),
])
def test_runtime_malformed_environment(change, words):
    env = {**plan(4, 8).instance_env(2), **change}
    with pytest.raises(popdist_launcher.LaunchEnvironmentError, match=words):
        runtime.context_from_environ(env)


def test_port_taken_between_choosing_and_binding_is_skipped():
    low = 24000
    blockers = []
    for port in range(low, low + 3):  # occupy two of three candidates
        if port != low + 1:
            s = socket.socket()
            s.bind(("", port))
            blockers.append(s)
    try:
        with ports.reserve(1, port_range=(low, low + 2)) as got:
            assert got.ports == [low + 1]
            # Another job cannot get the same port while this one holds it.
            with pytest.raises(ports.PortError, match=r"only 0 were free \(2 in use, 1 held"):
                ports.reserve(1, port_range=(low, low + 2))
    finally:
        for s in blockers:
            s.close()


def test_reserved_ports_are_outside_the_ephemeral_range():
    with ports.reserve(8) as got:
        low, high = ports.candidate_range()
        assert len(set(got.ports)) == 8 and all(low <= p <= high for p in got.ports)
