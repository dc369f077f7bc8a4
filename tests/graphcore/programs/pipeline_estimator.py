"""Graphcore-style IPUPipelineEstimator program: a linear model in two pipeline stages trained
with gradient accumulation (SUM and MEAN), evaluated with an eval_metrics_fn and predicting;
writes OUT_DIR/pipeline-estimator-<instance>.json with what it saw.

usage: pipeline_estimator.py OUT_DIR
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

import popdist  # noqa: E402

out_dir = sys.argv[1]
GAC, UPDATES, BATCH, FEATURES, LR = 4, 2, 2, 3, 0.05
ITERATIONS = GAC * UPDATES
rng = np.random.default_rng(7)
x_all = rng.normal(size=(64, FEATURES)).astype("float32")
y_all = (x_all @ np.array([[1.0], [-2.0], [0.5]]) + 0.25).astype("float32")
w_init = np.array([[0.1], [0.2], [0.3]], "float32")
instances, index = popdist.getNumInstances(), popdist.getInstanceIndex()


def make_model_fn(reduction_method):
    def model_fn(mode, params):
        def stage1(features, labels):
            w = tf.get_variable("w", initializer=w_init, use_resource=True)
            return tf.matmul(features, w), labels

        def stage2(predictions, labels):
            b = tf.get_variable("b", initializer=[0.0], use_resource=True)
            predictions = predictions + b
            loss = tf.reduce_mean(tf.square(predictions - labels))
            if mode == tf.estimator.ModeKeys.PREDICT:
                return {"y": predictions}
            if mode == tf.estimator.ModeKeys.EVAL:
                return loss, predictions, labels
            return loss

        def optimizer_function(loss):
            return ipu.pipelining_ops.OptimizerFunctionOutput(
                tf.train.GradientDescentOptimizer(params["learning_rate"]), loss)

        def eval_metrics_fn(loss, predictions, labels):
            return {"loss": loss,
                    "mse": tf.metrics.mean_squared_error(labels, predictions),
                    "count": tf.metrics.mean(tf.cast(tf.size(labels), tf.float32))}

        return ipu.ipu_pipeline_estimator.IPUPipelineEstimatorSpec(
            mode, computational_stages=[stage1, stage2], optimizer_function=optimizer_function,
            eval_metrics_fn=eval_metrics_fn, gradient_accumulation_count=GAC,
            reduction_method=reduction_method, device_mapping=[0, 1],
            pipeline_schedule=ipu.pipelining_ops.PipelineSchedule.Grouped,
            offload_weight_update_variables=False)
    return model_fn


def input_fn():
    ds = tf.data.Dataset.from_tensor_slices((x_all, y_all)).shard(instances, index)
    return ds.batch(BATCH, drop_remainder=True)


def estimator(reduction_method, model_dir, iterations=ITERATIONS, model_fn=None):
    options = ipu.config.IPUConfig()
    options.auto_select_ipus = 2
    config = ipu.ipu_run_config.RunConfig(
        ipu_run_config=ipu.ipu_run_config.IPURunConfig(
            num_shards=2, iterations_per_loop=iterations, ipu_options=options),
        model_dir=model_dir, save_summary_steps=1, log_step_count_steps=None)
    return ipu.ipu_pipeline_estimator.IPUPipelineEstimator(
        model_fn=model_fn or make_model_fn(reduction_method), config=config,
        params={"learning_rate": LR})


def shared_dir(name):
    return os.path.join(os.environ.get("PIPELINE_MODEL_DIR", tempfile.mkdtemp()), name)


out = {}
for method in ("SUM", "MEAN"):
    est = estimator(getattr(ipu.gradient_accumulation.GradientAccumulationReductionMethod, method),
                    shared_dir(method))
    steps = []
    for _ in range(2):
        est.train(input_fn, steps=ITERATIONS)
        steps.append(int(est.get_variable_value("global_step")))
    out[method] = {"w": est.get_variable_value("w").ravel().tolist(),
                   "b": est.get_variable_value("b").tolist(), "global_steps": steps}
    if method == "SUM":
        losses = []
        if index == 0:
            from tensorflow.python.summary import summary_iterator
            for name in sorted(os.listdir(est.model_dir)):
                if name.startswith("events.out.tfevents"):
                    for event in summary_iterator.summary_iterator(
                            os.path.join(est.model_dir, name)):
                        losses += [v.simple_value for v in event.summary.value if v.tag == "loss"]
        out["logged_losses"] = losses
        out["eval"] = {k: float(v) for k, v in est.evaluate(input_fn, steps=ITERATIONS).items()}
        out["predict"] = [float(p["y"][0]) for p in est.predict(input_fn, num_predictions=5)]
        out["predict_batches"] = [p["y"].ravel().tolist() for p in
                                  est.predict(input_fn, yield_single_examples=False,
                                              num_predictions=2)]

# Graphcore's checks, with its messages.
errors = {}


def error_of(name, fn):
    try:
        fn()
    except (ValueError, TypeError, KeyError) as e:
        errors[name] = str(e)


def with_features(features, labels, mode):
    return None


error_of("features", lambda: estimator("SUM", shared_dir("bad1"), model_fn=with_features).train(
    input_fn, steps=ITERATIONS))
error_of("not_divisible", lambda: estimator("SUM", shared_dir("bad2"), iterations=6).train(
    input_fn, steps=6))
error_of("spec", lambda: ipu.ipu_pipeline_estimator.IPUPipelineEstimatorSpec(
    tf.estimator.ModeKeys.TRAIN, computational_stages=[], gradient_accumulation_count=2))
out["errors"] = errors
with open(os.path.join(out_dir, f"pipeline-estimator-{index}.json"), "w") as f:
    json.dump(out, f)
