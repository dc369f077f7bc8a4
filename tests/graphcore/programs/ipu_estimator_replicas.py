"""IPURunConfig(num_replicas=2) with ipu_options selecting 2 IPUs, in one process: the
IPUEstimator trains 2 replicas, as Graphcore's. Writes the weights, the global step and the
replica count to OUT/ipu-estimator-replicas.json."""
import json
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python import ipu

from popdist_launcher.ipu_runtime.configured_system import get_configured_system

rng = np.random.default_rng(5)
X = rng.normal(size=(16, 3)).astype(np.float32)
Y = rng.normal(size=(16, 1)).astype(np.float32)
W = rng.normal(size=(3, 1)).astype(np.float32)


def input_fn():
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(2, drop_remainder=True)


def model_fn(features, labels, mode):
    w = tf.compat.v1.get_variable("w", initializer=W)
    loss = tf.reduce_mean((tf.matmul(features, w) - labels) ** 2)
    optimizer = ipu.optimizers.CrossReplicaOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


config = ipu.config.IPUConfig()
config.auto_select_ipus = 2
run_config = ipu.ipu_run_config.RunConfig(
    ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=2, num_replicas=2,
                                                   ipu_options=config),
    model_dir=f"{sys.argv[1]}/model")
estimator = ipu.ipu_estimator.IPUEstimator(config=run_config, model_fn=model_fn)
estimator.train(input_fn, steps=4)
with open(f"{sys.argv[1]}/ipu-estimator-replicas.json", "w") as f:
    json.dump(dict(w=estimator.get_variable_value("w").ravel().tolist(),
                   step=int(estimator.get_variable_value("global_step")),
                   replicas=get_configured_system().num_local_replicas), f)
