"""An IPUEstimator program written for Graphcore's IPU API (TF1 style), run unedited.
usage: ipu_estimator.py OUT_DIR MODEL_DIR [popdist|multi-worker] [--host-call]

The input_fn shards by instance (as Graphcore's documentation says); model_fn records the sample
ids each replica trains on. --host-call applies the gradients on the host through host_call
(Graphcore's distributed-training pattern). OUT_DIR/estimator-<instance>.json gets the ids, the
weights and the evaluation.
"""
import json
import os
import sys

import numpy as np
import popdist
import popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu import ipu_estimator, ipu_run_config
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy
from tensorflow.python.ipu.ipu_multi_worker_strategy import IPUMultiWorkerStrategyV1

out_dir, model_dir = sys.argv[1], sys.argv[2]
strategy_name = sys.argv[3] if len(sys.argv) > 3 else "popdist"
host_call = "--host-call" in sys.argv
GLOBAL_BATCH, NUM_SAMPLES, LEARNING_RATE, ITERATIONS = 16, 128, 0.05, 2

rng = np.random.default_rng(2)
features = rng.normal(size=(NUM_SAMPLES, 4)).astype(np.float32)
targets = (features @ np.array([[2.0], [-1.0], [0.25], [1.0]]) + 0.5).astype(np.float32)
initial_kernel = rng.normal(size=(4, 1)).astype(np.float32)
seen = []


def record(ids):
    seen.extend(int(i) for i in ids.numpy())
    return 0


def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(({"id": np.arange(NUM_SAMPLES), "x": features},
                                                  targets))
    dataset = dataset.shard(num_shards=popdist.getNumInstances(), index=popdist.getInstanceIndex())
    return dataset.batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    # A Keras layer, as Graphcore's estimator examples build their models: under TF1 its
    # variables are named after the name scope, and evaluation restores what training saved.
    linear = tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(initial_kernel),
                                   name="linear")
    predictions = linear(features["x"])
    kernel, bias = linear.kernel, linear.bias
    loss = tf.reduce_mean(tf.reduce_sum((predictions - labels) ** 2, axis=1))
    if mode == tf.estimator.ModeKeys.EVAL:
        return ipu_estimator.IPUEstimatorSpec(
            mode, loss=loss,
            eval_metrics=(lambda p, y: {"mse": tf.compat.v1.metrics.mean_squared_error(y, p)},
                          [predictions, labels]))
    recorded = tf.py_function(record, [features["id"]], [tf.int64])
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE)
    if host_call:
        grads = [g for g, _ in optimizer.compute_gradients(loss, var_list=[kernel, bias])]

        def host_model_fn(*host_gradients):
            # This reduces the gradients over all replicas and updates the weights on the host.
            return optimizer.apply_gradients(zip(host_gradients, [kernel, bias]))

        with tf.control_dependencies(recorded):
            train_op = tf.identity(loss)
        return ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op,
                                              host_call=(host_model_fn, grads))
    with tf.control_dependencies(recorded):
        train_op = optimizer.minimize(loss)
    return ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)


strategy = PopDistStrategy() if strategy_name == "popdist" else IPUMultiWorkerStrategyV1()
num_replicas = popdist.getNumLocalReplicas()
ipu_options = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(ipu_options, ipus_per_replica=1, configure_device=True)
config = ipu_run_config.RunConfig(
    ipu_run_config=ipu_run_config.IPURunConfig(iterations_per_loop=ITERATIONS,
                                               num_replicas=num_replicas,
                                               ipu_options=ipu_options),
    train_distribute=strategy, model_dir=model_dir, tf_random_seed=1)
estimator = ipu_estimator.IPUEstimator(model_fn, config=config, train_batch_size=GLOBAL_BATCH,
                                       eval_batch_size=GLOBAL_BATCH)
estimator.train(input_fn, steps=NUM_SAMPLES // GLOBAL_BATCH)  # one epoch
evaluation = estimator.evaluate(input_fn, steps=NUM_SAMPLES // GLOBAL_BATCH)
weights = (estimator.get_variable_value("linear/kernel").ravel().tolist()
           + estimator.get_variable_value("linear/bias").tolist())
with open(os.path.join(out_dir, f"estimator-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump({"seen": seen, "weights": weights,
               "eval": {k: float(v) for k, v in evaluation.items()}}, f)
