"""Keras fit under PopDistStrategy, written for Graphcore's IPU API, run unedited.
usage: popdist_keras_fit.py OUT_DIR

A first layer records the sample ids each replica trains on, by epoch; OUT_DIR/keras-<instance>.json
gets them with the final weights.
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
GLOBAL_BATCH, NUM_SAMPLES, EPOCHS, LEARNING_RATE = 16, 128, 2, 0.05

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
# Per-replica batches (each replica reads its own, as on Graphcore's systems): every step
# trains on GLOBAL_BATCH samples and an epoch has len(dataset) // getNumLocalReplicas() steps.
dataset = dataset.batch(GLOBAL_BATCH // popdist.getNumTotalReplicas(), drop_remainder=True)

seen = []  # [epoch, sample id] pairs
epoch_now = [0]


def record(ids):
    seen.extend([epoch_now[0], int(i)] for i in ids.numpy())
    return 0


class Epoch(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        epoch_now[0] = epoch


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
    history = model.fit(dataset, epochs=EPOCHS, verbose=0, callbacks=[Epoch()])

kernel, bias = model.layers[-1].get_weights()
with open(os.path.join(out_dir, f"keras-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump({"seen": seen, "weights": kernel.ravel().tolist() + bias.tolist(),
               "loss": history.history["loss"]}, f)
