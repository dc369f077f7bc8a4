"""ipu.config: Graphcore's option names and validation, and local replicas as devices."""
import json

import pytest

import popdist_launcher
from popdist_launcher import ipu, runtime
from popdist_launcher.plan import build_plan
from conftest import poprun


def test_unknown_option_is_an_error_with_a_suggestion():
    config = ipu.config.IPUConfig()
    with pytest.raises(AttributeError, match="did you mean 'auto_select_ipus'"):
        config.auto_select_ipu = 2
    with pytest.raises(AttributeError, match="process_count"):
        config.experimental.multi_replica_distribution.proces_count = 2
    config.floating_point_behaviour.inv = True  # IPU-only options are accepted


@pytest.mark.parametrize("index, count, ok", [(0, 0, True), (5, 0, True), (1, 2, True),
                                              (2, 2, False), (-1, 2, False)])
def test_multi_replica_distribution_rules(index, count, ok):
    config = ipu.config.IPUConfig()
    config.experimental.multi_replica_distribution.process_index = index
    config.experimental.multi_replica_distribution.process_count = count
    if ok:
        assert ipu.config.validate(config) == 1
    else:
        with pytest.raises(ValueError, match="process_index"):
            ipu.config.validate(config)


def test_device_selection_validation():
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = [2, 2]
    assert ipu.config.validate(config) == 4
    config.select_ipus = 3
    with pytest.raises(ValueError, match="both set"):
        ipu.config.validate(config)
    config.auto_select_ipus = -1
    with pytest.raises(ValueError, match="non-negative"):
        ipu.config.validate(config)


def test_set_ipu_config_from_the_launch_environment():
    plan = build_plan(["p"], 4, [1, 2, 3, 4], ("127.0.0.1", 5), num_replicas=8, ipus_per_replica=2)
    runtime.init(plan.instance_env(3))
    try:
        config = popdist_launcher.set_ipu_config(ipu.config.IPUConfig())
        mrd = config.experimental.multi_replica_distribution
        assert (mrd.process_index, mrd.process_count) == (3, 4)
        assert config.auto_select_ipus == 2 * 2  # 2 local replicas x 2 IPUs each
    finally:
        runtime.init({})


@pytest.mark.slow
def test_local_replicas_are_devices_under_the_launcher(tmp_path):
    result = poprun("-np", "2", "--num-replicas", "4", "tests/workers/ipu_system.py",
                    str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for i in range(2):
        got = json.loads((tmp_path / f"ipu-{i}.json").read_text())
        assert got["process_index"] == i and got["process_count"] == 2
        assert got["auto_select_ipus"] == 2
        assert got["devices"] == ["/device:CPU:0", "/device:CPU:1"]
        assert got["logical_cpus"] == 2
        assert [d.rsplit("/", 1)[1] for d in got["placed_on"]] == ["device:CPU:0", "device:CPU:1"]
        assert got["global_replicas"] == 4
