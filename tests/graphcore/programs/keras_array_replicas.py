"""Keras fit / evaluate / predict on NumPy arrays with no batch size under an IPUStrategy of 4
replicas (IPUConfig.auto_select_ipus = 4), as Graphcore's tutorials call them: each replica
reads batches of Keras's default 32, an epoch runs (batches // 4) steps per replica and the
leftover batches are dropped. Trains once plainly and once with steps_per_execution 2 and 2
accumulated micro-batches, and the same models without a strategy on the kept rows in global
batches; writes the weights, losses, evaluate / predict results and the warnings logged to
OUT/keras-array-replicas-<instance>.json.

usage: keras_array_replicas.py OUT_DIR
"""
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

REPLICAS, BATCH, LR = 4, 32, 0.01
config = ipu.config.IPUConfig()
config.auto_select_ipus = REPLICAS
config.configure_ipu_system()

rng = np.random.default_rng(5)
X = rng.normal(size=(18 * BATCH, 3)).astype(np.float32)  # 18 batches: 4 per replica, 2 left
Y = rng.normal(size=(18 * BATCH, 1)).astype(np.float32)
W1 = rng.normal(size=(3, 2)).astype(np.float32)
W2 = rng.normal(size=(2, 1)).astype(np.float32)
KEPT = 16 * BATCH


class Warnings(logging.Handler):
    """Keeps the text of every warning logged."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


warnings = Warnings()
logging.getLogger().addHandler(warnings)


def model(lr, steps_per_execution=1):
    built = tf.keras.Sequential([
        tf.keras.layers.Dense(2, use_bias=False, kernel_initializer=tf.constant_initializer(W1),
                              input_shape=(3,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer=tf.constant_initializer(W2))])
    built.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse",
                  steps_per_execution=steps_per_execution)
    return built


def record(trained, history, evaluate, predicted):
    return {"weights": [w.ravel().tolist() for w in trained.get_weights()],
            "loss": history.history["loss"], "evaluate": evaluate,
            "predict": np.asarray(predicted).ravel().tolist()}


out = {}
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    plain = model(LR)
    history = plain.fit(X, Y, epochs=2, shuffle=False, verbose=0)
    out["plain"] = record(plain, history, plain.evaluate(X, Y, verbose=0),
                          plain.predict(X, verbose=0))
    accumulated = model(LR, steps_per_execution=2)
    accumulated.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2,
                                                  gradient_accumulation_reduction_method="mean")
    history = accumulated.fit(X, Y, epochs=2, shuffle=False, verbose=0)
    out["accumulated"] = record(accumulated, history, None, [])
out["warnings"] = warnings.messages

# One device on the same global batches: the replicas' gradients are summed (Graphcore's), so
# the learning rate is REPLICAS times; MEAN accumulation of 2 micro-batches doubles the batch.
for name, batch in (("plain", BATCH * REPLICAS), ("accumulated", 2 * BATCH * REPLICAS)):
    single = model(LR * REPLICAS)
    history = single.fit(X[:KEPT], Y[:KEPT], batch_size=batch, epochs=2, shuffle=False, verbose=0)
    out[f"{name}_one_device"] = record(
        single, history, single.evaluate(X[:KEPT], Y[:KEPT], batch_size=BATCH, verbose=0),
        single.predict(X[:KEPT], batch_size=BATCH, verbose=0))

index = int(os.environ.get("POPDIST_INSTANCE_INDEX", "0"))
with open(os.path.join(sys.argv[1], f"keras-array-replicas-{index}.json"), "w") as f:
    json.dump(out, f)
