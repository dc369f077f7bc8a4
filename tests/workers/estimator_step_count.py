"""Calls IPUEstimator.train(steps=k) many times on one model_dir and records the global step
after each call; writes OUT_DIR/step-count.json.

usage: estimator_step_count.py OUT_DIR CALLS

The model_fns count steps as programs do: minimize(..., global_step=...); their own
assign_add of the global step, which does not wait for the step's compute (the quickest way
for a step's increment to race with the loop's read of the step it starts from); and a
host_call whose apply_gradients increments the global step. iterations_per_loop is 1 and 2.
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from popdist_launcher import ipu  # noqa: E402

out_dir, calls = sys.argv[1], int(sys.argv[2])
x = np.arange(32, dtype="float32").reshape(16, 2) / 16
y = x.sum(axis=1, keepdims=True)
PATTERNS = ["minimize", "own_increment", "host_call"]


def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", initializer=[[0.0], [0.0]], use_resource=True)
    loss = tf.reduce_mean((tf.matmul(features, w) - labels) ** 2)
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.01)
    global_step = tf.compat.v1.train.get_global_step()
    pattern = params["pattern"]
    if pattern == "minimize":
        train_op = opt.minimize(loss, global_step=global_step)
    elif pattern == "own_increment":
        train_op = tf.group(opt.minimize(loss), tf.compat.v1.assign_add(global_step, 1))
    else:
        grads = [g for g, _ in opt.compute_gradients(loss, var_list=[w])]
        return ipu.ipu_estimator.IPUEstimatorSpec(
            mode, loss=loss, train_op=tf.identity(loss),
            host_call=(lambda g: opt.apply_gradients([(g, w)], global_step=global_step), grads))
    return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn(params):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(params["batch_size"]).repeat()


records = []
for pattern in PATTERNS:
    for per_loop in (1, 2):
        config = ipu.ipu_run_config.RunConfig(
            ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=per_loop),
            model_dir=tempfile.mkdtemp(), save_checkpoints_steps=10 ** 6, save_summary_steps=0,
            log_step_count_steps=None)
        estimator = ipu.ipu_estimator.IPUEstimator(model_fn, config=config, train_batch_size=4,
                                                   params={"pattern": pattern})
        expected = 0
        for call in range(calls):
            steps = per_loop * (1 + call % 2)
            estimator.train(input_fn, steps=steps)
            expected += steps
            got = int(estimator.get_variable_value("global_step"))
            records.append({"pattern": pattern, "iterations_per_loop": per_loop, "call": call,
                            "expected": expected, "global_step": got})
            expected = got  # count each call's own error once
with open(os.path.join(out_dir, "step-count.json"), "w") as f:
    json.dump(records, f)
