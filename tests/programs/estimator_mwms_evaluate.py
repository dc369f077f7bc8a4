"""tf.estimator.train_and_evaluate with train_distribute=MultiWorkerMirroredStrategy, as TensorFlow
documents it: run by every training instance and by the evaluator (TF_CONFIG task "evaluator").
The chief writes its final weights to OUT/trained.json; the evaluator, which evaluates every new
checkpoint until the last one, then reads back the loss it recorded for each global step (its
eval summaries) into OUT/evaluated.json.

Usage: estimator_mwms_evaluate.py OUT
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()  # what TensorFlow asks of Estimator with this strategy
MAX_STEPS, BATCH, LR = 6, 4, 0.05
out = sys.argv[1]
task = json.loads(os.environ["TF_CONFIG"])["task"]
rng = np.random.default_rng(0)
x_all = rng.normal(size=(16, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
x_eval, y_eval = x_all[:8], y_all[:8] + 0.5


def model_fn(features, labels, mode):
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean((tf.matmul(features, w) - labels) ** 2)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def train_input_fn(input_context=None):
    return tf.data.Dataset.from_tensor_slices((x_all, y_all)).repeat().batch(BATCH)


def eval_input_fn():
    return tf.data.Dataset.from_tensor_slices((x_eval, y_eval)).batch(8)


config = tf.estimator.RunConfig(
    model_dir=os.path.join(out, "model"), save_checkpoints_steps=3,
    train_distribute=tf.distribute.MultiWorkerMirroredStrategy())
estimator = tf.estimator.Estimator(model_fn, config=config)
tf.estimator.train_and_evaluate(
    estimator, tf.estimator.TrainSpec(train_input_fn, max_steps=MAX_STEPS),
    tf.estimator.EvalSpec(eval_input_fn, steps=None, start_delay_secs=0, throttle_secs=1))
if task["type"] == "evaluator":  # what the evaluator wrote for each checkpoint it evaluated
    evaluated = {}
    for name in os.listdir(os.path.join(out, "model", "eval")):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(out, "model", "eval", name)):
            for value in event.summary.value:
                if value.tag == "loss":
                    evaluated[int(event.step)] = float(tf.make_ndarray(value.tensor)) \
                        if value.HasField("tensor") else value.simple_value
    with open(os.path.join(out, "evaluated.json"), "w") as f:
        json.dump({str(step): loss for step, loss in sorted(evaluated.items())}, f)
    last = max(evaluated)
    print(f"evaluator: evaluated global steps {sorted(evaluated)}; loss {evaluated[last]:.6f} at "
          f"step {last}", flush=True)
elif task["type"] == "chief" or (task["type"] == "worker" and task["index"] == 0
                                 and "chief" not in json.loads(os.environ["TF_CONFIG"])["cluster"]):
    with open(os.path.join(out, "trained.json"), "w") as f:
        json.dump({"w": estimator.get_variable_value("w").ravel().tolist(),
                   "global_step": int(estimator.get_variable_value("global_step"))}, f)
