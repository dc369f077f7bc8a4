"""A Graphcore-style TF 2.6 program laid out as programs usually are: its own modules, each
with its imports sorted, so Keras names are bound before (main.py, models.py) and after
(late.py) the module that imports the IPU layer (ipu_setup.py), also kept in a dict, a default
argument and a subclass. Trains a linear model with ``RMSprop(lr=..., rho=..., epsilon=...,
decay=...)`` from each binding under IPUStrategy and writes the classes and weights to
OUT/import-order-<instance>.json.

usage: main.py OUT_DIR [ipu-first]   (ipu-first: import the IPU layer before anything else)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if sys.argv[2:] == ["ipu-first"]:
    from tensorflow.python import ipu  # noqa: F401
from tensorflow.keras.optimizers import RMSprop as MainRMSprop  # noqa: E402

MAIN_BY_NAME = {"rmsprop": MainRMSprop}


class MainScaledRMSprop(MainRMSprop):
    """Subclassed in the main module before the IPU import."""


def main_make(optimizer_class=MainRMSprop, **kwargs):
    return optimizer_class(**kwargs)


import models  # noqa: E402
import ipu_setup  # noqa: E402
import late  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.keras.optimizers import RMSprop as MainRMSpropAfter  # noqa: E402

import popdist  # noqa: E402

out_dir = sys.argv[1]
bound = {"main.RMSprop": MainRMSprop, "main.RMSpropAfter": MainRMSpropAfter,
         "main.BY_NAME.rmsprop": MAIN_BY_NAME["rmsprop"],
         "main.ScaledRMSprop.base": MainScaledRMSprop.__bases__[0],
         "main.make.default": main_make.__defaults__[0], **models.bound(), **late.bound()}
out = {"classes": {k: f"{v.__module__}.{v.__qualname__}" for k, v in bound.items()}}

rng = np.random.default_rng(3)
X = rng.normal(size=(8, 3)).astype("float32")
Y = rng.normal(size=(8, 1)).astype("float32")
W0 = rng.normal(size=(3, 1)).astype("float32")

strategy = ipu_setup.configure()


def train(make_optimizer, steps=4):
    with strategy.scope():
        w = tf.Variable(W0)
        opt = make_optimizer()

        @tf.function
        def step():
            def fn():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((tf.matmul(X, w) - Y) ** 2)
                opt.apply_gradients([(tape.gradient(loss, w), w)])
                return loss
            return strategy.run(fn)

        for _ in range(steps):
            step()
        return w.numpy().ravel().tolist()


kwargs = dict(lr=0.05, rho=0.9, epsilon=1e-08, decay=0.1)
out["weights"] = {
    "main.RMSprop": train(lambda: MainRMSprop(**kwargs)),
    "main.RMSpropAfter": train(lambda: MainRMSpropAfter(**kwargs)),
    "models.RMSprop": train(lambda: models.RMSprop(**kwargs)),
    "late.RMSprop": train(lambda: late.RMSprop(**kwargs)),
    "models.rmsprop_module.RMSprop": train(lambda: models.rmsprop_module.RMSprop(**kwargs)),
    "main.BY_NAME.rmsprop": train(lambda: MAIN_BY_NAME["rmsprop"](**kwargs)),
    "main.ScaledRMSprop": train(lambda: MainScaledRMSprop(**kwargs)),
    "main.make": train(lambda: main_make(**kwargs)),
    "models.BY_NAME.rmsprop": train(lambda: models.BY_NAME["rmsprop"](**kwargs)),
    "models.ScaledRMSprop": train(lambda: models.ScaledRMSprop(**kwargs)),
    "models.make": train(lambda: models.make(**kwargs)),
    "models.KERAS_RMSPROP": train(lambda: models.KERAS_RMSPROP(**kwargs)),
    "models.TF_RMSPROP": train(lambda: models.TF_RMSPROP(**kwargs)),
    "late.ScaledRMSprop": train(lambda: late.ScaledRMSprop(**kwargs)),
}
out["models.optimizer"] = type(models.optimizer()).__module__
out["X"], out["Y"], out["W0"] = X.tolist(), Y.tolist(), W0.tolist()
with open(os.path.join(out_dir, f"import-order-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
