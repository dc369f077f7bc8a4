"""A Keras program in the style of Graphcore's TensorFlow 2.6 SDK: it imports Keras internals by their
TF 2.6 names (keras.optimizer_v2, keras.engine.data_adapter, tensorflow.python.keras.datasets),
starts its train_step with data_adapter.expand_1d, passes a tensor as steps_per_execution, and
builds a model twice after tf.random.set_seed (Graphcore's keras_poprun_test compares the two).
Writes what it saw to OUT_DIR/tf26.json."""
import json
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python import ipu

import keras
from keras.engine import data_adapter
from keras.optimizer_v2 import optimizer_v2
from keras.optimizer_v2.gradient_descent import SGD
from tensorflow.python.keras.datasets import mnist
import tensorflow.python.keras.optimizer_v2.optimizer_v2 as tf_legacy_optimizer_v2

out_dir = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 3)).astype(np.float32)
y = rng.normal(size=(32, 1)).astype(np.float32)
w0 = rng.normal(size=(3, 1)).astype(np.float32)


class Linear(keras.Model):
    """A custom train_step written the TF 2.6 way, with data_adapter's unpacking."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, use_bias=False,
                                        kernel_initializer=keras.initializers.Constant(w0))

    def call(self, inputs):
        return self.dense(inputs)

    def train_step(self, data):
        data = data_adapter.expand_1d(data)
        features, labels, _ = data_adapter.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(features, training=True) - labels))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables),
                                           self.trainable_variables))
        return {"loss": loss}


config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    model = Linear()
    optimizer = SGD(0.1)
    model.compile(optimizer=optimizer, steps_per_execution=tf.constant(4))
    history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)



def seeded_kernel():
    """A Dense layer's initial kernel right after tf.random.set_seed (no initializer seed)."""
    tf.random.set_seed(1234)
    layer = keras.layers.Dense(3)
    layer.build((None, 4))
    return layer.kernel.numpy()


glorot = keras.initializers.GlorotUniform()
column = data_adapter.expand_1d((tf.constant([1.0, 2.0]), {"m": tf.ones((2, 3))}, None, "text"))
result = {
    "same_seed_same_kernel": bool(np.array_equal(seeded_kernel(), seeded_kernel())),
    "unseeded_initializer_calls_differ": not np.array_equal(glorot((3, 3)), glorot((3, 3))),
    "expand_1d": [column[0].shape.as_list(), column[1]["m"].shape.as_list(), column[2],
                  column[3]],
    "weights": model.dense.kernel.numpy().ravel().tolist(),
    "last_loss": float(history.history["loss"][-1]),
    "steps_per_execution": int(model._steps_per_execution.numpy()),
    "optimizer_is_v2": isinstance(optimizer, optimizer_v2.OptimizerV2),
    "optimizer_v2_module": optimizer_v2.__name__,
    "data_adapter_module": data_adapter.__name__,
    "mnist_module": mnist.__name__,
    "tf_legacy_module": tf_legacy_optimizer_v2.__name__,
    "tf_legacy_file": tf_legacy_optimizer_v2.__file__.replace("\\", "/").split("site-packages/")[-1],
}
with open(f"{out_dir}/tf26.json", "w") as f:
    json.dump(result, f)
