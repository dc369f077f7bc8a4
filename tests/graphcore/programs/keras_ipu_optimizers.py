"""keras.ipu.optimizers (ALS, gradient accumulation) and Graphcore's replicas of a non-pipelined
Keras model on an IPUStrategy whose devices TensorFlow made before configure_ipu_system: writes
weights, loss scaling factors and outputs to OUT/keras-ipu-optimizers-<instance>.json."""
import json
import sys

import keras
import numpy as np
import popdist
import tensorflow as tf
from keras.ipu.layers import CaptureUpstreamGradients
from keras.ipu.optimizers import (ALSGradientAccumulationOptimizer, ALSOptimizer, ALSOptimizerAdam,
                                  ALSOptimizerRMSProp, ALSOptimizerSGD,
                                  GradientAccumulationOptimizer)
from keras.optimizer_v2.gradient_descent import SGD
from tensorflow.python import ipu

tf.constant(1.0) + 1.0  # TensorFlow starts here, with one CPU device, before the IPU system
rng = np.random.default_rng(5)
X = rng.normal(size=(16, 3)).astype(np.float32)
Y = rng.normal(size=(16, 1)).astype(np.float32)
W = rng.normal(size=(3, 1)).astype(np.float32)
out = {}


def linear_model():
    return keras.Sequential([keras.layers.Dense(1, use_bias=False, input_shape=(3,),
                                                kernel_initializer=keras.initializers.Constant(W))])


class RecordLSF(keras.callbacks.Callback):
    def __init__(self, optimizer):
        super().__init__()
        self.optimizer, self.lsf = optimizer, []

    def on_train_batch_end(self, batch, logs=None):
        self.lsf.append(float(self.optimizer.loss_scaling_factor))


# A: ALSOptimizer around SGD in Keras fit (float32: the LSF doubles up to the maximum).
als = ALSOptimizer(SGD(0.1), update_frequency=2, max_loss_scaling_factor=8)
model = linear_model()
model.compile(optimizer=als, loss="mse")
record = RecordLSF(als)
model.fit(X, Y, batch_size=2, shuffle=False, epochs=1, verbose=0, callbacks=[record])
out["als_fit"] = dict(w=model.get_weights()[0].ravel().tolist(), lsf=record.lsf,
                      prev=float(als.previous_loss_scaling_factor),
                      counter=int(als.update_counter), iterations=int(als.iterations),
                      histogram=als.histogram.numpy().tolist(), lr=float(als.learning_rate))
als.learning_rate = 0.5
out["als_fit"]["lr_set"] = float(als.inner_optimizer.learning_rate)
again = ALSOptimizer.from_config(als.get_config())
out["als_fit"]["config"] = [again.update_frequency, again.max_loss_scaling_factor,
                            type(again.inner_optimizer).__name__]
# ALSOptimizerSGD / Adam / RMSProp come back from their configuration with their inner arguments.
out["als_configs"] = {
    cls.__name__: cls.from_config(cls(update_frequency=3, **kw).get_config()).get_config() ==
    cls(update_frequency=3, **kw).get_config()
    for cls, kw in ((ALSOptimizerSGD, dict(learning_rate=0.1, momentum=0.5)),
                    (ALSOptimizerAdam, dict(learning_rate=0.2, beta_1=0.8)),
                    (ALSOptimizerRMSProp, dict(learning_rate=0.3, rho=0.7, centered=True)))}

# B: float16 gradients fill the histogram; the LSF goes down and up again.
C = np.array([0.5, 1.0, 2.0, 40.0], np.float16)
w16 = tf.Variable(np.ones(4, np.float16))
als16 = ALSOptimizerSGD(0.01, initial_loss_scaling_factor=2, update_frequency=2,
                        max_loss_scaling_factor=64, ratio_threshold=0.2, histogram_bin_edge=64)


@tf.function
def step16():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w16 * C)
    als16.minimize(loss, [w16], tape=tape)


trace = []
for _ in range(9):
    step16()
    trace.append([float(als16.loss_scaling_factor), als16.histogram.numpy().tolist()])
out["als_fp16"] = dict(trace=trace, w=w16.numpy().astype(np.float64).tolist())

# C: ALSGradientAccumulationOptimizer in a compiled loop, Graphcore's get_gradients style.
dense = keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(W))
dense.build((None, 3))
ga_als = ALSGradientAccumulationOptimizer(ALSOptimizer(SGD(0.1), update_frequency=1,
                                                       max_loss_scaling_factor=4), 2)


@tf.function(jit_compile=True)
def ga_step(x, y):
    loss = tf.reduce_mean((dense(x) - y) ** 2)
    grads = ga_als.get_gradients(loss, dense.trainable_variables)
    return ga_als.apply_gradients(zip(grads, dense.trainable_variables))


ga_trace = []
for i in range(0, 8, 2):
    applied = ga_step(X[i:i + 2], Y[i:i + 2])
    ga_trace.append([bool(applied), float(ga_als.loss_scaling_factor),
                     dense.kernel.numpy().ravel().tolist()])
out["als_ga"] = ga_trace

# D: GradientAccumulationOptimizer (MEAN) around a Keras 2.11+ optimizer, in Keras fit.
ga = GradientAccumulationOptimizer(tf.keras.optimizers.SGD(0.1), 2, reduction_method="mean")
model = linear_model()
model.compile(optimizer=ga, loss="mse")
model.fit(X, Y, batch_size=2, shuffle=False, epochs=1, verbose=0)
out["ga_fit"] = dict(w=model.get_weights()[0].ravel().tolist(), calls=int(ga.iterations),
                     updates=int(ga.inner_optimizer.iterations),
                     same=GradientAccumulationOptimizer(SGD(0.1), 1).__class__.__name__)

# E: auto_select_ipus = 2 on an IPUStrategy made after TensorFlow started: 2 replicas.
config = ipu.config.IPUConfig()
config.auto_select_ipus = 2
config.configure_ipu_system()
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    model = linear_model()
    model.compile(optimizer=SGD(0.1), loss="mse", steps_per_execution=2)
    history = model.fit(X, Y, batch_size=2, shuffle=False, epochs=2, verbose=0)
    out["replicas"] = dict(w=model.get_weights()[0].ravel().tolist(),
                           loss=history.history["loss"],
                           evaluate=model.evaluate(X, Y, batch_size=2, verbose=0),
                           predict=model.predict(X, batch_size=2, verbose=0).ravel().tolist())
    model = linear_model()
    model.compile(optimizer=ALSOptimizer(SGD(0.1)), loss="mse", steps_per_execution=2)
    model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2)
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2)
    model.fit(dataset, epochs=1, verbose=0)
    out["replicas_ga_als"] = dict(w=model.get_weights()[0].ravel().tolist(),
                                  counter=int(model.optimizer.update_counter))
    wrapped = keras.Sequential([CaptureUpstreamGradients(keras.layers.Dense(
        1, use_bias=False, input_shape=(3,), kernel_initializer=keras.initializers.Constant(W)))])
    wrapped.compile(optimizer=SGD(0.1), loss="mse")
    wrapped.fit(X, Y, batch_size=2, shuffle=False, epochs=1, verbose=0)
    out["capture_w"] = wrapped.get_weights()[0].ravel().tolist()

with open(f"{sys.argv[1]}/keras-ipu-optimizers-{popdist.getInstanceIndex()}.json", "w") as f:
    json.dump(out, f)
