"""Pipelined Keras models on 4 IPUs in Graphcore's style: a functional model split with
keras.ipu.PipelineStage and a Sequential split with set_pipeline_stage_assignment, 2 stages,
IPUConfig.auto_select_ipus = 4, so Graphcore's rule gives 2 replicas of 2 IPUs. Writes the
weights, losses, evaluate/predict results, a stage's outfeed and the errors of other layouts
to OUT/keras-pipelining-<instance>.json."""
import json
import sys

import numpy as np
import popdist
import tensorflow as tf
from keras import ipu as keras_ipu
from tensorflow.python import ipu

config = ipu.config.IPUConfig()
config.auto_select_ipus = 4
config.configure_ipu_system()

rng = np.random.default_rng(3)
X = rng.normal(size=(32, 3)).astype(np.float32)
Y = rng.normal(size=(32, 1)).astype(np.float32)
W1 = rng.normal(size=(3, 2)).astype(np.float32)
W2 = rng.normal(size=(2, 1)).astype(np.float32)
out = {}


def error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the program records what was raised)
        return [type(exc).__name__, str(exc)]
    return None


def dataset():
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(2, drop_remainder=True)


class Outfeed(tf.keras.layers.Layer):
    """Enqueues its input (as Graphcore's inspecting_tensors tutorial does) and returns it."""

    def __init__(self, queue):
        super().__init__()
        self.queue = queue

    def call(self, inputs):
        if not tf.distribute.in_cross_replica_context():  # not while Keras builds the model
            self.queue.enqueue(inputs)
        return inputs


def functional():
    inputs = tf.keras.Input((3,), batch_size=2)  # an outfeed needs static shapes
    with keras_ipu.PipelineStage(0):
        hidden = tf.keras.layers.Dense(2, use_bias=False,
                                       kernel_initializer=tf.constant_initializer(W1))(inputs)
    with keras_ipu.PipelineStage(1):
        hidden = Outfeed(activations)(hidden)
        outputs = tf.keras.layers.Dense(1, use_bias=False,
                                        kernel_initializer=tf.constant_initializer(W2))(hidden)
    return tf.keras.Model(inputs, outputs)


def sequential():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(2, use_bias=False, kernel_initializer=tf.constant_initializer(W1),
                              input_shape=(3,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer=tf.constant_initializer(W2))])
    assignments = model.get_pipeline_stage_assignment()
    for stage, assignment in enumerate(assignments):
        assignment.pipeline_stage = stage
    model.set_pipeline_stage_assignment(assignments)
    return model


strategy = ipu.ipu_strategy.IPUStrategy()
activations = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
for name, build, method in (("functional", functional, "mean"), ("sequential", sequential, "sum")):
    with strategy.scope():
        model = build()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=4)
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=2,
                                     gradient_accumulation_reduction_method=method)
        history = model.fit(dataset(), epochs=2, verbose=0)
        if name == "functional":  # [micro-batches per replica, replicas, batch, 2]
            fed = activations.dequeue().numpy()
            out["activations_shape"] = list(fed.shape)
            out["activations_first"] = fed[0].tolist()
        out[name] = {
            "w1": model.get_weights()[0].ravel().tolist(),
            "w2": model.get_weights()[1].ravel().tolist(),
            "loss": history.history["loss"],
            "iterations": int(model.optimizer.iterations.numpy()),
            "evaluate": model.evaluate(dataset(), verbose=0),
            "predict": model.predict(X[:8], batch_size=2, verbose=0).ravel().tolist(),
            "stages": [a.pipeline_stage for a in model.get_pipeline_stage_assignment()],
        }

# Graphcore's rule elsewhere: 5 stages need 8 IPUs; a pipelining_ops pipeline over 2 IPUs under
# this IPUStrategy of 4 one-IPU devices needs --ipus-per-replica 2; one over [0, 0] fits.
with strategy.scope():
    deep = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,)) for _ in range(5)])
    deep.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    deep.set_pipeline_stage_assignment(list(range(5)))
    deep.set_pipelining_options(gradient_accumulation_steps_per_replica=2)
    out["five_stages"] = error(lambda: deep.fit(np.zeros((8, 1)), np.zeros((8, 1)), batch_size=2,
                                                verbose=0))


def run_pipeline(mapping):
    feed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def replica():
        ipu.pipelining_ops.pipeline([lambda: tf.constant(1.0), lambda x: x + 1.0],
                                    gradient_accumulation_count=2, outfeed_queue=feed,
                                    device_mapping=mapping)

    tf.function(lambda: strategy.run(replica))()
    return feed.dequeue().numpy().tolist()


out["pipeline_ops_two_ipus"] = error(lambda: run_pipeline([0, 1]))
out["pipeline_ops_one_ipu"] = run_pipeline([0, 0])

with open(f"{sys.argv[1]}/keras-pipelining-{popdist.getInstanceIndex()}.json", "w") as f:
    json.dump(out, f)
