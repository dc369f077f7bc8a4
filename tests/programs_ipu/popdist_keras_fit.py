"""Keras fit under PopDistStrategy, written for Graphcore's IPU API, run unedited.
usage: popdist_keras_fit.py OUT_DIR

A first layer records the sample ids each replica trains on; OUT_DIR/keras-<instance>.json gets
them with the final weights.
"""
import json
import os
import sys

import numpy as np
import popdist
import popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu.horovod.popdist_strategy import PopDistStrategy

out_dir = sys.argv[1]
GLOBAL_BATCH, NUM_SAMPLES, LEARNING_RATE = 16, 128, 0.05

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
strategy = PopDistStrategy()

rng = np.random.default_rng(1)
features = rng.normal(size=(NUM_SAMPLES, 4)).astype(np.float32)
targets = (features @ np.array([[0.5], [1.0], [-1.5], [2.0]]) - 0.3).astype(np.float32)
initial_kernel = rng.normal(size=(4, 1)).astype(np.float32)
with_ids = np.concatenate([np.arange(NUM_SAMPLES, dtype=np.float32)[:, None], features], axis=1)

dataset = tf.data.Dataset.from_tensor_slices((with_ids, targets))
dataset = dataset.shard(num_shards=popdist.getNumInstances(), index=popdist.getInstanceIndex())
dataset = dataset.batch(GLOBAL_BATCH // popdist.getNumInstances(), drop_remainder=True)

seen = []


def record(ids):
    seen.extend(int(i) for i in ids.numpy())
    return 0


class RecordIds(tf.keras.layers.Layer):
    """Records column 0 (the sample id) while training; passes the features on."""

    def call(self, inputs, training=None):
        if training:
            tf.py_function(record, [inputs[:, 0]], [tf.int64])
        return inputs[:, 1:]


with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input((5,)), RecordIds(),
        tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(initial_kernel))])
    model.compile(optimizer=tf.keras.optimizers.SGD(LEARNING_RATE), loss="mse",
                  steps_per_execution=2)
    history = model.fit(dataset, epochs=1, verbose=0)

kernel, bias = model.layers[-1].get_weights()
with open(os.path.join(out_dir, f"keras-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump({"seen": seen, "weights": kernel.ravel().tolist() + bias.tolist(),
               "loss": history.history["loss"]}, f)
