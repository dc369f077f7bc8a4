"""ipu.config: Graphcore's option names and validation, and local replicas as devices."""
import json

import pytest

import popdist_launcher
from popdist_launcher import ipu, runtime
from popdist_launcher.launcher.layout.plan import build_plan
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


# Graphcore's option tree (SDK 3.x config.py): every option, with its default.
GRAPHCORE_OPTIONS = {
    "auto_select_ipus": [], "select_ipus": [], "allow_recompute": False,
    "selection_order": "AUTO", "serialization_output_folder": "", "compilation_poplar_options": {},
    "gcl_poplar_options": {}, "convolutions.poplar_options": {},
    "device_connection.type": "ALWAYS", "device_connection.version": "",
    "device_connection.enable_remote_buffers": False, "slices.poplar_options": {},
    "experimental.always_rearrange_copies_on_the_host": False,
    "experimental.enable_remote_buffer_embedding": False,
    "experimental.enable_prng_stability": False,
    "experimental.multi_replica_distribution.process_index": 0,
    "experimental.multi_replica_distribution.process_count": 0,
    "floating_point_behaviour.inv": False, "floating_point_behaviour.oflo": False,
    "floating_point_behaviour.esr": "OFF", "floating_point_behaviour.nanoo": False,
    "floating_point_behaviour.set_all": False, "io_tiles.num_io_tiles": 0,
    "io_tiles.place_ops_on_io_tiles": False, "io_tiles.available_memory_proportion": 0.9,
    "ipu_model.compile_ipu_code": True, "ipu_model.tiles_per_ipu": 0, "ipu_model.version": "ipu2",
    "matmuls.clear_pass_type": False, "matmuls.poplar_options": {},
    "norms.use_stable_statistics": False,
    "norms.experimental.distributed_batch_norm_replica_group_size": 1,
    "optimizations.math.fast": False, "optimizations.math.dot_strength": True,
    "optimizations.prefetch_data_streams": True, "optimizations.combine_embedding_lookups": False,
    "optimizations.combine_matmuls": False, "optimizations.enable_graph_outlining": True,
    "optimizations.merge_infeed_io_copies": True,
    "optimizations.maximum_cross_replica_sum_buffer_size": 0,
    "optimizations.maximum_reduce_scatter_buffer_size": 0,
    "optimizations.maximum_inter_ipu_copies_buffer_size": 0,
    "optimizations.maximum_send_recv_cluster_size": 0,
    "optimizations.maximum_reduce_many_buffer_size": 0,
    "optimizations.maximum_all_gather_buffer_size": 0,
    "optimizations.minimum_remote_tensor_size": 128,
    "optimizations.merge_remote_buffers": "IF_BENEFICIAL",
    "optimizations.enable_gather_simplifier": True,
    "optimizations.triangular_solve_expander_block_size": 0,
    "optimizations.cholesky_block_size": 0, "optimizations.enable_fast_math": False,
    "optimizations.enable_dynamic_slice_replacement": True, "pooling.poplar_options": {},
    "scheduling.algorithm": "CHOOSE_BEST", "scheduling.maximum_scheduler_lookahead_depth": 5,
    "scheduling.maximum_scheduler_search_space_size": 64,
}


def test_every_graphcore_option_with_its_default():
    options = ipu.config.IPUConfig().to_dict()
    missing = {k: v for k, v in GRAPHCORE_OPTIONS.items() if options.get(k, "-") != v}
    assert not missing


def test_types_are_checked_on_assignment():
    # config_test.py testAssignment / testTypeHints / testAutoSelectBoolFails /
    # testUnionOfIntAndEnumFails.
    config = ipu.config.IPUConfig()
    config.optimizations.minimum_remote_tensor_size = 1024
    with pytest.raises(TypeError, match="must be of type int"):
        config.optimizations.minimum_remote_tensor_size = True
    assert config.optimizations.minimum_remote_tensor_size == 1024
    with pytest.raises(TypeError, match="auto_select_ipus"):
        config.auto_select_ipus = True
    with pytest.raises(TypeError, match="SchedulingAlgorithm"):
        config.scheduling.algorithm = 1
    config.io_tiles.available_memory_proportion = 1  # an int is a float
    config.floating_point_behaviour.esr = True      # bools still accepted, as Graphcore's
    assert config.floating_point_behaviour.esr == ipu.config.StochasticRoundingBehaviour.ON
    with pytest.raises(AttributeError, match="group of options"):
        config.optimizations.math = 3


def test_dict_json_deepcopy_and_enums():
    # testDeepCopy, testToDictAndToJson, testFromDictAndFromJson(OnEnums), testRepr.
    import copy
    config = ipu.config.IPUConfig()
    config.device_connection.type = ipu.config.DeviceConnectionType.ON_DEMAND
    config.matmuls.poplar_options = {"availableMemoryProportion": "0.6"}
    assert config.to_dict()["device_connection.type"] == "ON_DEMAND"
    again = ipu.config.IPUConfig()
    again.from_json(config.to_json())
    assert again.to_dict() == config.to_dict()
    clone = copy.deepcopy(config)
    clone.matmuls.poplar_options["x"] = "1"
    assert "x" not in config.matmuls.poplar_options
    assert "ON_DEMAND" in repr(config)


def test_device_connection_version_required():
    # testDeviceConnectionTypeVersionRequired.
    config = ipu.config.IPUConfig()
    config.device_connection.type = ipu.config.DeviceConnectionType.NEVER
    with pytest.raises(ValueError, match="version"):
        ipu.config.validate(config)
    config.device_connection.version = "ipu2"
    assert ipu.config.validate(config) == 1


def test_ipu_only_options_are_logged_once(caplog):
    caplog.set_level("INFO", logger="popdist_launcher.ipu.config")
    for _ in range(2):
        config = ipu.config.IPUConfig()
        config.optimizations.maximum_all_gather_buffer_size = 7 * 1024 * 1024
        config.optimizations.maximum_all_gather_buffer_size = 8 * 1024 * 1024
    lines = [r.getMessage() for r in caplog.records
             if "maximum_all_gather_buffer_size" in r.getMessage()]
    assert len(lines) == 1 and "no effect" in lines[0]
    config.auto_select_ipus = 4  # an option that does something here is not logged
    assert not [r for r in caplog.records if "auto_select_ipus" in r.getMessage()]
