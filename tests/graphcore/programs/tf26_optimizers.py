"""TensorFlow 2.6's Keras optimizers in a Graphcore-style program: which classes the public names,
string names, ``get`` and ``deserialize`` give; RMSprop(lr=..., decay=...) trained plainly (saved to h5 and
loaded between its two epochs), with gradient accumulation and as a two-stage pipeline with
steps_per_execution above the epoch's steps (the logs the progress bar shows per execution and
per epoch). Writes OUT/tf26-optimizers-<instance>.json."""
import json
import sys

import keras
import numpy as np
import popdist
import tensorflow as tf
from tensorflow.python import ipu

from keras.ipu.optimizers import GradientAccumulationOptimizer  # noqa: I100 (after the IPU layer)
from keras.optimizer_v2 import optimizer_v2  # a TF 2.6 name

config = ipu.config.IPUConfig()
config.auto_select_ipus = 2
config.configure_ipu_system()

rng = np.random.default_rng(7)
X = rng.normal(size=(16, 3)).astype(np.float32)
Y = rng.normal(size=(16, 1)).astype(np.float32)
W1 = rng.normal(size=(3, 2)).astype(np.float32)
W2 = rng.normal(size=(2, 1)).astype(np.float32)
out = {"classes": {}}

for name in ("SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl"):
    for where, made in (("tf.keras", lambda n: getattr(tf.keras.optimizers, n)()),
                        ("keras", lambda n: getattr(keras.optimizers, n)()),
                        ("get", lambda n: tf.keras.optimizers.get(n.lower())),
                        ("deserialize", lambda n: keras.optimizers.deserialize(
                            {"class_name": n, "config": {}}))):
        opt = made(name)
        out["classes"][f"{where}.{name}"] = [type(opt).__module__, type(opt).__name__,
                                            isinstance(opt, optimizer_v2.OptimizerV2)]
out["optimizer_base"] = tf.keras.optimizers.Optimizer is optimizer_v2.OptimizerV2
stock = tf.keras.optimizers.serialize(tf.keras.optimizers.experimental.Adam(0.5))
out["stock_config_class"] = type(tf.keras.optimizers.deserialize(stock)).__module__
rms = tf.keras.optimizers.RMSprop(lr=0.01, decay=0.1, rho=0.8)
again = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(rms))
out["round_trip"] = [type(again).__name__, again.get_config()]
# The IPU layer's wrappers take TF 2.6's classes and, by their lasting name, Keras 2.11+'s.
out["wrappers"] = [type(GradientAccumulationOptimizer(made, 2)._opt).__module__
                   for made in (tf.keras.optimizers.SGD(0.1),
                                tf.keras.optimizers.experimental.SGD(0.1))]
out["pipeline_output"] = type(ipu.pipelining_ops.OptimizerFunctionOutput(
    tf.keras.optimizers.experimental.SGD(0.1), tf.constant(1.0)).opt).__module__
strategy = ipu.ipu_strategy.IPUStrategy()


def two_layers():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, use_bias=False, input_shape=(3,)),
                                 tf.keras.layers.Dense(1, use_bias=False)])
    model.set_weights([W1, W2])
    return model


class Logs(tf.keras.callbacks.Callback):
    """The logs ProgbarLogger gets: after each execution and at each epoch's end."""

    def __init__(self):
        super().__init__()
        self.batches, self.epochs = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append([batch, float(logs["loss"])])

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(float(logs["loss"]))


def train(kind, path=None):
    data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2, drop_remainder=True).repeat()
    logs = Logs()
    with strategy.scope():
        model = two_layers()
        spe = 1
        if kind == "accumulated":
            model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=4)
            spe = 8
        elif kind == "pipelined":
            assignments = model.get_pipeline_stage_assignment()
            for stage, assignment in enumerate(assignments):
                assignment.pipeline_stage = stage
            model.set_pipeline_stage_assignment(assignments)
            model.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
            spe = 16  # above the 8 steps of an epoch, as in Graphcore's pipelining example
        model.compile(optimizer=tf.keras.optimizers.RMSprop(lr=0.01, decay=0.1, rho=0.8),
                      loss="mse", steps_per_execution=spe)
        epochs = 1 if path else 2
        history = model.fit(data, epochs=epochs, steps_per_epoch=8, verbose=0, callbacks=[logs])
        if path:
            model.save(path)
            model = tf.keras.models.load_model(path)
            out[f"{kind}_loaded"] = [type(model.optimizer).__name__,
                                     model.optimizer.get_config()["decay"],
                                     int(model.optimizer.iterations.numpy())]
            history2 = model.fit(data, epochs=1, steps_per_epoch=8, verbose=0, callbacks=[logs])
            history.history["loss"] += history2.history["loss"]
    out[kind] = {"optimizer": type(model.optimizer).__name__,
                 "weights": [w.numpy().ravel().tolist() for w in model.trainable_weights],
                 "loss": history.history["loss"], "batch_logs": logs.batches,
                 "epoch_logs": logs.epochs}


with strategy.scope():
    by_name = two_layers()
    by_name.compile(optimizer="rmsprop", loss="mse")
    out["compile_by_name"] = type(by_name.optimizer).__module__
train("plain", f"{sys.argv[1]}/model-{popdist.getInstanceIndex()}.h5")  # saved after epoch 1
for kind in ("accumulated", "pipelined"):
    train(kind)
with open(f"{sys.argv[1]}/tf26-optimizers-{popdist.getInstanceIndex()}.json", "w") as f:
    json.dump(out, f)
