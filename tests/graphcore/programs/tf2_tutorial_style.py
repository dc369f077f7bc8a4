"""A pipelined Keras program laid out as Graphcore's TF2 tutorials lay them out: the dataset is
built before the IPU system is configured, ``from tensorflow.keras import ipu`` at the top, a
Sequential model without an input shape split into stages with set_pipeline_stage_assignment,
two IPUs selected for a two-stage pipeline. Writes OUT/tutorial.json.

usage: tf2_tutorial_style.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.keras import ipu  # noqa: E402
from tensorflow.keras import layers  # noqa: E402
from tensorflow.python.ipu import config, ipu_strategy, utils  # noqa: E402

rng = np.random.default_rng(0)
X = rng.normal(size=(32, 3)).astype("float32")
Y = rng.normal(size=(32, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)

cfg = config.IPUConfig()
cfg.auto_select_ipus = 2
cfg.selection_order = config.SelectionOrder.ZIGZAG
cfg.allow_recompute = True
cfg.configure_ipu_system()
utils.move_variable_initialization_to_cpu()

strategy = ipu_strategy.IPUStrategy()
with strategy.scope():
    model = tf.keras.Sequential([
        layers.Dense(3, use_bias=False, kernel_initializer=tf.constant_initializer(np.eye(3) * 0.5)),
        layers.Dense(1, use_bias=False, kernel_initializer="ones"),
    ])
    model.set_pipeline_stage_assignment([0, 1])
    model.set_pipelining_options(gradient_accumulation_steps_per_replica=4,
                                 device_mapping=[0, 1])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=8)
    model.fit(dataset, epochs=1, verbose=0)
    assignment = [a.pipeline_stage for a in model.get_pipeline_stage_assignment()]

with open(os.path.join(sys.argv[1], "tutorial.json"), "w") as f:
    json.dump({"w1": model.get_weights()[0].ravel().tolist(),
               "w2": model.get_weights()[1].ravel().tolist(), "assignment": assignment,
               "iterations": int(model.optimizer.iterations.numpy()),
               "stage_class": ipu.PipelineStage.__name__}, f)
