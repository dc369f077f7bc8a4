"""Names Graphcore's own distributed tests (graphcore/tensorflow ``tensorflow/python/ipu/tests``,
``ipu/distributed``, ``ipu/horovod``) use, with their meaning here: the estimator at TensorFlow
2.15's internal path, ``array_ops.stack`` / ``unstack`` and
``input_lib.DistributedDatasetInterface`` and ``distribute_lib.get_loss_reduction`` where
TensorFlow moved them, ``OptimizerFunctionOutput``
with any optimizer whichever Keras the program has, and ``ipu.horovod``'s build facts as the SDK's
MPI-only Horovod gave them."""
import subprocess
import sys

import numpy as np
import pytest

from conftest import job_environ


def test_the_estimator_imports_at_tensorflows_internal_path():
    # ipu_multi_worker_strategy_test.py, estimator_test.py, ipu_estimator_test.py
    import tensorflow as tf
    from tensorflow.python.estimator import estimator_lib
    from tensorflow.python.estimator import model_fn as model_fn_lib
    from tensorflow.python.estimator import run_config
    assert estimator_lib.train_and_evaluate is tf.estimator.train_and_evaluate
    assert estimator_lib.TrainSpec is tf.estimator.TrainSpec
    assert model_fn_lib.EstimatorSpec is tf.estimator.EstimatorSpec
    assert model_fn_lib.ModeKeys.TRAIN == "train" and model_fn_lib.LOSS_METRIC_KEY == "loss"
    assert run_config.RunConfig is tf.estimator.RunConfig


def test_stack_and_unstack_are_array_ops_names_again():
    # all_gather_test.py, reduce_scatter_test.py: x1, x2 = array_ops.unstack(x, axis=0)
    import tensorflow as tf
    from tensorflow.python.ops import array_ops
    first, second = array_ops.unstack(tf.constant([[1, 2], [3, 4]]), axis=0)
    np.testing.assert_array_equal(second, [3, 4])
    np.testing.assert_array_equal(array_ops.stack([first, second], axis=1), [[1, 3], [2, 4]])


def test_distributed_dataset_interface_is_at_input_lib_again():
    # TensorFlow's own old Keras copy picks its data adapter with this name.
    import tensorflow as tf
    from tensorflow.python.distribute import input_lib
    assert input_lib.DistributedDatasetInterface is tf.distribute.DistributedDataset
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
    assert isinstance(dataset, input_lib.DistributedDatasetInterface)


def test_get_loss_reduction_is_a_distribute_lib_name_again():
    # ipu_multi_worker_strategy_test.py: distribute_lib.get_loss_reduction() in an estimator's
    # model_fn (TensorFlow moved it to distribute_utils): SUM by default, MEAN where the
    # estimator scales the loss by the replicas.
    import tensorflow as tf
    from tensorflow.python.distribute import distribute_lib
    assert distribute_lib.get_loss_reduction() == tf.distribute.ReduceOp.SUM
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with tf.Graph().as_default(), strategy.scope(), \
            strategy._scale_loss_for_estimator_enabled():  # noqa: SLF001
        assert distribute_lib.get_loss_reduction() == tf.distribute.ReduceOp.MEAN


OPTIMIZERS = """
import sys
import tensorflow as tf
from popdist_launcher.ipu.ops import pipelining_ops
from popdist_launcher.compat import keras2
loss = tf.constant(1.0)
for opt in (tf.keras.optimizers.SGD(0.1), tf.compat.v1.train.GradientDescentOptimizer(0.1)):
    assert pipelining_ops.OptimizerFunctionOutput(opt, loss).opt is opt
for bad, value in (("opt", "sgd"), ("loss", 1.0)):
    args = {"opt": tf.compat.v1.train.GradientDescentOptimizer(0.1), "loss": loss, bad: value}
    try:
        pipelining_ops.OptimizerFunctionOutput(args["opt"], args["loss"])
    except TypeError as error:
        assert f"OptimizerFunctionOutput.{bad} must be" in str(error), error
    else:
        sys.exit(f"{bad}={value!r} was accepted")
print("keras 3" if keras2.keras_3_active() else "keras 2")
"""


@pytest.mark.parametrize("legacy_keras", ["0", "1"])
def test_optimizer_function_output_takes_any_optimizer_under_either_keras(legacy_keras):
    env = {**job_environ(), "TF_USE_LEGACY_KERAS": legacy_keras, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", OPTIMIZERS], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import tensorflow as tf
    keras_3_here = int(tf.__version__.split(".")[1]) >= 16 and legacy_keras == "0"
    assert result.stdout.split("\n")[-2] == ("keras 3" if keras_3_here else "keras 2")


def test_ipu_horovod_reports_the_sdks_mpi_only_build():
    # horovod_test.py test_basics: MPI built and enabled; no NCCL, DDL or Gloo.
    from tensorflow.python.ipu import distributed, horovod as hvd
    assert hvd.mpi_built() is True and hvd.mpi_enabled() is True
    assert not any(f() for f in (hvd.nccl_built, hvd.ddl_built, hvd.gloo_built,
                                 hvd.gloo_enabled))
    import horovod.tensorflow as real
    assert distributed.gloo_built() == real.gloo_built()  # ipu.distributed: the installed one's


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["popdist", "multi-worker"])
def test_the_strategies_variables_are_graphcores_classes_with_its_numbers(tmp_path, kind):
    import json
    from pathlib import Path
    from conftest import poprun
    program = Path(__file__).parent / "programs" / "variable_classes.py"
    result = poprun("-np", "2", str(program), str(tmp_path), kind, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for index in (0, 1):
        out = json.loads((tmp_path / f"variables-{index}.json").read_text())
        assert out["classes"] == ["IPUSyncOnReadVariable", "IPUMirroredVariable", True, True,
                                  True]
        assert out["batch_norm_classes"] == [True] * 4
        assert out["on_read_initial"] == 1.0  # instance 0's initial value
        assert out["on_read_after"] == 2.5
        assert out["mirrored_sum"] == 2.0  # 1 * 1 on each of the two replicas
        # mean(mean(2, 0), mean(4, 0)) and mean(var(2, 0), var(4, 0)), as Graphcore's test
        assert out["moving_mean"] == [1.5] and out["moving_variance"] == [2.5]


GRAPHCORE_STYLE_TEST = '''
import numpy as np
import tensorflow as tf
from tensorflow.python import ipu
from popdist_launcher.compat import keras2


def test_runs_as_an_ipu_program():
    assert not keras2.keras_3_active()  # Keras 2, as for any IPU program
    assert hasattr(np, "float_")  # NumPy 1.x's names from NumPy's import on
    assert ipu.config.IPUConfig is not None
'''
PLAIN_TEST = '''
import tensorflow as tf
from popdist_launcher.compat import keras2


def test_runs_as_a_plain_program():
    assert keras2.keras_3_active() == (int(tf.__version__.split(".")[1]) >= 16)
'''


@pytest.mark.parametrize("source", [GRAPHCORE_STYLE_TEST, PLAIN_TEST])
def test_a_test_file_run_by_pytest_is_the_program(tmp_path, source):
    # Graphcore's test files run under pytest: the program is the test file, not pytest's main.
    (tmp_path / "test_program.py").write_text(source)
    env = {k: v for k, v in job_environ().items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(tmp_path / "test_program.py")], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
