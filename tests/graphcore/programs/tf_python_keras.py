"""An IPU program that builds Keras models through ``tensorflow.python.keras`` (TensorFlow 2.6's
internal names, as Graphcore's SDK programs did) and mixes them with ``tf.keras`` objects: a
``Sequential`` from ``tensorflow.python.keras.engine.sequential`` compiled with a tf.keras
optimizer, and a tf.keras ``Sequential`` compiled with ``optimizer_v2.gradient_descent.SGD``,
both trained under PopDistStrategy on this instance's shard. Writes OUT/tf-python-keras-<instance>.json.

usage: tf_python_keras.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy  # noqa: E402
from tensorflow.python.keras import layers, losses  # noqa: E402
from tensorflow.python.keras.engine import sequential, training  # noqa: E402
from tensorflow.python.keras.layers import advanced_activations, embeddings, merge  # noqa: E402
from tensorflow.python.keras.optimizer_v2 import gradient_descent, optimizer_v2  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

out_dir = sys.argv[1]
config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 3)).astype(np.float32)
y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
count, index = popdist.getNumInstances(), popdist.getInstanceIndex()
per_replica = 16 // popdist.getNumTotalReplicas()


def dataset():
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(count, index)
    return data.batch(per_replica, drop_remainder=True)


def dense(seed):
    return dict(kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed))


with PopDistStrategy().scope():
    internal = sequential.Sequential([layers.Dense(4, **dense(1)), advanced_activations.LeakyReLU(),
                                      layers.Dense(1, **dense(2))])
    internal.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss=losses.MeanSquaredError())
    internal_history = internal.fit(dataset(), epochs=3, verbose=0)
    public = tf.keras.Sequential([tf.keras.layers.Dense(4, **dense(1)), tf.keras.layers.LeakyReLU(),
                                  tf.keras.layers.Dense(1, **dense(2))])
    public.compile(optimizer=gradient_descent.SGD(0.05), loss="mse")
    public_history = public.fit(dataset(), epochs=3, verbose=0)

result = {
    "same_objects": {
        "Model": training.Model is tf.keras.Model,
        "Sequential": sequential.Sequential is tf.keras.Sequential,
        "Dense": layers.Dense is tf.keras.layers.Dense,
        "Add": merge.Add is tf.keras.layers.Add,
        "Embedding": embeddings.Embedding is tf.keras.layers.Embedding,
        "LeakyReLU": advanced_activations.LeakyReLU is tf.keras.layers.LeakyReLU,
        "MeanSquaredError": losses.MeanSquaredError is tf.keras.losses.MeanSquaredError,
        "OptimizerV2": isinstance(tf.keras.optimizers.SGD(), optimizer_v2.OptimizerV2),
        "internal_is_model": isinstance(internal, tf.keras.Model),
    },
    "internal": [w.ravel().tolist() for w in internal.get_weights()],
    "public": [w.ravel().tolist() for w in public.get_weights()],
    "internal_loss": internal_history.history["loss"],
    "public_loss": public_history.history["loss"],
}
with open(os.path.join(out_dir, f"tf-python-keras-{index}.json"), "w") as f:
    json.dump(result, f)
