"""Trains, evaluates and predicts with IPUEstimators; each run writes OUT_DIR/estimator-<i>.json.

usage: estimator_checks.py STRATEGY RUN [+ RUN]...
RUN:   MODEL_DIR OUT_DIR [--strategy STRATEGY] [--iterations-per-loop N] [--steps N] [--host-call]
       [--eval-metrics] [--input-context] [--resume-steps N] [--train-batch-size N]
       [--graph-mode] [--train-and-evaluate]

Runs joined by "+" run one after the other in this process, each with a strategy (its --strategy,
else STRATEGY), a RunConfig and an estimator of its own; IPUMultiWorkerStrategy shares its
process with no other strategy (it makes the process a worker of TensorFlow's cluster, which the
others' sessions would run in). MODEL_DIR "none" builds the estimator without a model_dir.
--graph-mode turns eager execution off before anything else (TF1-era programs do), so it belongs
to the first run. The input_fn shards by instance, as Graphcore's documentation tells programs to
(the IPUEstimator shards nothing itself).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher import ipu, strategies  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("model_dir")
parser.add_argument("out_dir")
parser.add_argument("--strategy")
parser.add_argument("--iterations-per-loop", type=int, default=1)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--resume-steps", type=int, default=0)
parser.add_argument("--host-call", action="store_true")
parser.add_argument("--eval-metrics", action="store_true")
parser.add_argument("--input-context", action="store_true")
parser.add_argument("--train-batch-size", type=int, default=16)
parser.add_argument("--graph-mode", action="store_true")
parser.add_argument("--train-and-evaluate", action="store_true")
strategy_name, runs, run_args = sys.argv[1], [], []
for word in [*sys.argv[2:], "+"]:
    if word == "+":
        runs.append(parser.parse_args(run_args))
        run_args = []
    else:
        run_args.append(word)
used = {args.strategy or strategy_name for args in runs}
if "multi-worker" in used and len(used) > 1:
    raise SystemExit("IPUMultiWorkerStrategy shares its process with no other strategy")
if any(args.graph_mode for args in runs[1:]):
    raise SystemExit("--graph-mode turns eager execution off for the process: the first run only")
if runs[0].graph_mode:
    tf.compat.v1.disable_eager_execution()

GLOBAL_BATCH, FEATURES, LR = 16, 6, 0.1
rng = np.random.default_rng(42)
x_all = rng.normal(size=(GLOBAL_BATCH * 8, FEATURES)).astype("float32")
y_all = (x_all @ rng.normal(size=(FEATURES, 1)) + 0.3).astype("float32")
w_init = rng.normal(size=(FEATURES, 1)).astype("float32") * 0.1
ctx = popdist_launcher.init()


def make_model_fn(args):
    """The model_fn of one run (its evaluation metrics and host_call as the run asks)."""
    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", initializer=w_init + ctx.instance_index,
                                      use_resource=True)
        b = tf.compat.v1.get_variable("b", initializer=[0.0], use_resource=True)
        predictions = tf.matmul(features, w) + b
        if mode == tf.estimator.ModeKeys.PREDICT:
            return ipu.ipu_estimator.IPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.reduce_mean(tf.reduce_sum((predictions - labels) ** 2, axis=1))
        if mode == tf.estimator.ModeKeys.EVAL:
            if args.eval_metrics:
                def metric_fn(pred, lab):
                    return {"mse": tf.compat.v1.metrics.mean_squared_error(lab, pred),
                            "count": tf.compat.v1.metrics.mean(tf.cast(tf.size(lab), tf.float32))}
                return ipu.ipu_estimator.IPUEstimatorSpec(
                    mode, loss=loss, eval_metrics=(metric_fn, [predictions, labels]))
            mse = tf.compat.v1.metrics.mean_squared_error(labels, predictions)
            return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss,
                                                      eval_metric_ops={"mse": mse})
        opt = tf.compat.v1.train.GradientDescentOptimizer(LR)
        if args.host_call:
            # Graphcore's distributed-training pattern: gradients leave the device, the optimizer
            # applies them on the host (reducing them over every replica of every instance).
            grads = [g for g, _ in opt.compute_gradients(loss, var_list=[w, b])]

            def apply_on_host(*host_grads):
                return opt.apply_gradients(zip(host_grads, [w, b]))
            return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=tf.identity(loss),
                                                      host_call=(apply_on_host, grads))
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


def input_fn(params):
    ds = tf.data.Dataset.from_tensor_slices((x_all, y_all))
    return ds.shard(ctx.num_instances, ctx.instance_index).batch(params["batch_size"])


def input_fn_with_context(params, input_context):
    ds = tf.data.Dataset.from_tensor_slices((x_all, y_all)).batch(params["batch_size"])
    return ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def run(args) -> None:
    """One run: train (and evaluate), evaluate, predict; write the results."""
    names = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
             "multi-worker": "IPUMultiWorkerStrategy"}
    strategy = getattr(strategies, names[args.strategy or strategy_name])()
    config = ipu.ipu_run_config.RunConfig(
        ipu_run_config=ipu.ipu_run_config.IPURunConfig(
            iterations_per_loop=args.iterations_per_loop),
        train_distribute=strategy, model_dir=None if args.model_dir == "none" else args.model_dir,
        save_checkpoints_steps=2,
        tf_random_seed=1)
    estimator = ipu.ipu_estimator.IPUEstimator(make_model_fn(args), config=config,
                                               train_batch_size=args.train_batch_size,
                                               eval_batch_size=GLOBAL_BATCH,
                                               predict_batch_size=GLOBAL_BATCH)
    train_input = input_fn_with_context if args.input_context else input_fn
    if args.resume_steps:
        estimator.train(train_input, steps=args.resume_steps)
    if args.train_and_evaluate:
        metrics, _ = tf.estimator.train_and_evaluate(
            estimator, tf.estimator.TrainSpec(train_input, max_steps=args.steps),
            tf.estimator.EvalSpec(input_fn, steps=2, throttle_secs=0))
    else:
        metrics = None
        estimator.train(train_input, steps=args.steps)
    out = {
        "w": estimator.get_variable_value("w").ravel().tolist(),
        "b": estimator.get_variable_value("b").tolist(),
        "global_step": int(estimator.get_variable_value("global_step")),
        "latest": os.path.basename(estimator.latest_checkpoint() or ""),
        "is_chief": estimator.config.is_chief,
    }
    out["model_dir"] = estimator.model_dir
    out["eval"] = {k: float(v) for k, v in estimator.evaluate(input_fn, steps=2).items()}
    if metrics is not None:
        out["train_and_evaluate"] = {k: float(v) for k, v in metrics.items()}
    out["predict"] = [float(p["y"][0])
                      for p in estimator.predict(input_fn, yield_single_examples=True)][:8]
    with open(os.path.join(args.out_dir, f"estimator-{ctx.instance_index}.json"), "w") as f:
        json.dump(out, f)


for args in runs:
    run(args)
