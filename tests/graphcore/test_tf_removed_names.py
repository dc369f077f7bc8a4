"""Module names of TF 1.15 / 2.6 that Graphcore's applications import and TF 2.15 removed
(docs/tf-removed-apis.md): each works with its meaning here, or fails with one sentence."""
import numpy as np
import pytest


def test_distribution_strategy_context_is_distribute_lib():
    import tensorflow as tf
    from tensorflow.python.distribute import distribution_strategy_context as context
    assert not context.has_strategy()
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        assert context.get_strategy() is strategy and context.has_strategy()
        assert context.in_cross_replica_context()


def test_pywrap_tensorflow_reads_checkpoints(tmp_path):
    import tensorflow as tf
    from tensorflow import pywrap_tensorflow
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tf.train.Checkpoint(v=tf.Variable(value)).write(str(tmp_path / "ckpt"))
    for reader in (pywrap_tensorflow.NewCheckpointReader(path),
                   tf.compat.v1.NewCheckpointReader(path)):
        key = next(k for k in reader.get_variable_to_shape_map() if k.startswith("v/"))
        np.testing.assert_array_equal(reader.get_tensor(key), value)


def test_keras_loss_function_wrapper_is_public_again():
    import tensorflow as tf
    from keras.losses import LossFunctionWrapper
    loss = LossFunctionWrapper(tf.keras.losses.mean_squared_error)
    assert float(loss([[1.0, 2.0]], [[3.0, 2.0]])) == 2.0


@pytest.mark.parametrize("statement,module", [
    ("import tensorflow.contrib.slim", "tensorflow.contrib"),
    ("from tensorflow.tools.graph_transforms import TransformGraph",
     "tensorflow.tools.graph_transforms")])
def test_removed_modules_say_what_to_use(statement, module):
    import tensorflow  # noqa: F401 (the site hook installs the names with TensorFlow)
    with pytest.raises(ModuleNotFoundError, match=f"^{module}.* was removed in TensorFlow 2 "
                                                  f"and is not provided here: "):
        exec(statement, {})
