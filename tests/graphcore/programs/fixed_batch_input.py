"""A Keras model built with a fixed batch, ``keras.Input(shape, batch_size=B)`` with B the
micro-batch per replica (as Graphcore's programs build them), under PopDistStrategy: every
replica reads batches of B from the same data, and a layer uses the model's static batch
(``tf.reshape(t, [B, ...])``). Trains with SGD, then evaluates; writes the built batch size,
weights and losses to OUT/fixed-batch-<instance>.json.

usage: fixed_batch_input.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.distributed import popdist_strategy  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

MICRO_BATCH = 4
rng = np.random.default_rng(11)
X = rng.normal(size=(16, 3)).astype("float32")
Y = rng.normal(size=(16, 1)).astype("float32")
W0 = rng.normal(size=(6, 1)).astype("float32")

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
strategy = popdist_strategy.PopDistStrategy()


def batches():
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(MICRO_BATCH, drop_remainder=True)


with strategy.scope():
    inputs = tf.keras.Input(shape=(3,), batch_size=MICRO_BATCH)
    built_batch = inputs.shape[0]
    # features and their squares, through the model's static batch size
    both = tf.keras.layers.Lambda(
        lambda t: tf.reshape(tf.stack([t, t * t], axis=1), [built_batch, 6]))(inputs)
    outputs = tf.keras.layers.Dense(1, use_bias=False,
                                    kernel_initializer=tf.constant_initializer(W0))(both)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    history = model.fit(batches(), epochs=2, verbose=0)
    loss = model.evaluate(batches(), verbose=0)

out = {"built_batch": built_batch, "replicas": strategy.num_replicas_in_sync,
       "w": model.get_weights()[0].ravel().tolist(), "fit_loss": history.history["loss"],
       "evaluate": loss, "X": X.tolist(), "Y": Y.tolist(), "W0": W0.tolist()}
with open(os.path.join(sys.argv[1], f"fixed-batch-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
