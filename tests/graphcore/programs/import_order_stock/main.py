"""The import-order program's own modules (../import_order/models.py and late.py, which bind
every Keras optimizer name, also in a dict, a default argument and a subclass) in a program
that never names Graphcore's modules: stock Keras 2's optimizers everywhere, and TF 2.6's
``decay=`` refused as stock Keras refuses it. Writes OUT/stock-<instance>.json.

usage: main.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "import_order"))

import late  # noqa: E402
import models  # noqa: E402
import tensorflow as tf  # noqa: E402

import popdist  # noqa: E402

bound = {**models.bound(), **late.bound()}
out = {"classes": {k: f"{v.__module__}.{v.__qualname__}" for k, v in bound.items()}}
try:
    models.RMSprop(learning_rate=0.001, decay=0.1)
    out["decay"] = "accepted"
except ValueError:
    out["decay"] = "ValueError"
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
model.compile(optimizer="rmsprop", loss="mse")
out["compile"] = type(model.optimizer).__module__
out["ipu"] = sorted(m for m in sys.modules if m.startswith("tensorflow.python.ipu"))
with open(os.path.join(sys.argv[1], f"stock-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
