"""An IPU program that writes TensorBoard summaries of every kind, as Graphcore's TF2 programs
do: scalars, images, histograms, text and audio with ``tf.summary``, and Keras' TensorBoard
callback (weight histograms and images) around ``fit`` under IPUStrategy. Each instance writes
under LOGDIR/instance-<index>.

usage: summaries.py LOGDIR
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

import popdist  # noqa: E402

logdir = os.path.join(sys.argv[1], f"instance-{popdist.getInstanceIndex()}")
config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()

images = np.linspace(0.0, 1.0, 2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
writer = tf.summary.create_file_writer(os.path.join(logdir, "direct"))
with writer.as_default():
    for step in range(3):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
    tf.summary.image("inputs", images, step=0, max_outputs=2)
    tf.summary.histogram("weights", np.arange(10, dtype=np.float32), step=0)
    tf.summary.text("note", "written by an IPU program", step=0)
    tf.summary.audio("tone", np.sin(np.linspace(0, 20, 800, dtype=np.float32)).reshape(1, 800, 1),
                     sample_rate=8000, step=0)
writer.flush()

rng = np.random.default_rng(0)
x = rng.normal(size=(32, 2, 2, 1)).astype(np.float32)
y = x.reshape(32, 4).sum(axis=1, keepdims=True)
with ipu.ipu_strategy.IPUStrategy().scope():
    model = tf.keras.Sequential([tf.keras.layers.Conv2D(1, 2, input_shape=(2, 2, 1)),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tf.keras.callbacks.TensorBoard(
        os.path.join(logdir, "keras"), histogram_freq=1, write_images=True)])
