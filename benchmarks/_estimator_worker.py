"""One training run of the estimator-throughput benchmark; started by
benchmarks/estimator_throughput.py (see its docstring for the whole picture).

usage: _estimator_worker.py --variant {ipu,plain,ceiling} --result FILE [options]

* ``ipu``: examples/cnn_estimator.py's own ``model_fn`` (IPUEstimatorSpec, CrossReplicaOptimizer
  around MomentumOptimizer) in an ``ipu.ipu_estimator.IPUEstimator`` with
  ``--iterations-per-loop`` steps per Session.run, under PopDistStrategy. Meant to run under
  ``poprun-lite -np N``; ``--global-batch`` is split over the N instances.
* ``plain``: the same layers in a ``model_fn`` that returns a plain ``tf.estimator.EstimatorSpec``
  with a plain ``MomentumOptimizer``, in a plain ``tf.estimator.Estimator`` (one Session.run per
  step). Run directly with Python, one process.
* ``ceiling``: the same layers, loss and MomentumOptimizer with no estimator at all: a bare
  ``tf.function`` that runs ``--iterations-per-loop`` training steps in a ``tf.range`` loop over
  an iterator of the same input_fn's dataset, called until ``--steps`` steps have run. What the
  model's own compute and input pipeline allow: the IPUEstimator's ceiling. One process.

Both train on the digits data (examples/_digits.py) from the same kind of input_fn: it returns
per-replica batches of ``params['batch_size']``, shuffled, repeated, prefetched. One ``train()``
call runs ``--steps`` steps; a SessionRunHook notes the wall-clock time after every Session.run,
and the throughput is taken between the first and the last of those, so graph building, session
creation, the first run and the final checkpoint are all left out. Instance 0 writes JSON to
``--result``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

_STARTED = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)

import tensorflow as tf  # noqa: E402

import _digits  # noqa: E402  (examples/_digits.py)
import cnn_estimator  # noqa: E402  (examples/cnn_estimator.py: the model under test)
from popdist_launcher import ipu, runtime, strategies  # noqa: E402

_IMPORTED_S = time.perf_counter() - _STARTED


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("ipu", "plain", "ceiling"), required=True)
    parser.add_argument("--result", required=True, help="instance 0 writes its JSON here")
    parser.add_argument("--model-dir", required=True,
                        help="checkpoint folder, the same for every instance (created if missing)")
    parser.add_argument("--iterations-per-loop", type=int, default=1,
                        help="ipu only: training steps per Session.run")
    parser.add_argument("--steps", type=int, default=2000,
                        help="steps of the one train() call (a multiple of iterations-per-loop)")
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--window-steps", type=int, default=100,
                        help="steps per window of the median-window throughput (a multiple of "
                             "iterations-per-loop)")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--inter-op-threads", type=int, default=0, help="0: TensorFlow's default")
    return parser.parse_args(argv)


# ---- model and input ---------------------------------------------------------------------------
def plain_model_fn(features, labels, mode, params):
    """examples/cnn_estimator.py's network and loss, for a plain tf.estimator.Estimator:
    EstimatorSpec and a plain MomentumOptimizer (training only, which is all this measures)."""
    x = tf.compat.v1.layers.conv2d(features, 32, 3, padding="same", activation=tf.nn.relu)
    x = tf.compat.v1.layers.conv2d(x, 64, 3, padding="same", activation=tf.nn.relu)
    x = tf.compat.v1.layers.max_pooling2d(x, 2, 2)
    x = tf.compat.v1.layers.flatten(x)
    x = tf.compat.v1.layers.dense(x, 128, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(x, 10)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    optimizer = tf.compat.v1.train.MomentumOptimizer(params["learning_rate"], momentum=0.9)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def train_ceiling(args: argparse.Namespace, dataset: tf.data.Dataset, timer: "RunTimer") -> None:
    """The bare loop: ``--iterations-per-loop`` steps per call of one tf.function, no estimator,
    no session, no hooks; ``timer`` notes the time after every call."""
    layers = tf.keras.layers
    model = tf.keras.Sequential([
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(2, 2), layers.Flatten(),
        layers.Dense(128, activation="relu"), layers.Dense(10)])
    model.build((None, 8, 8, 1))
    optimizer = tf.compat.v1.train.MomentumOptimizer(args.learning_rate, momentum=0.9)
    timer.trainable_parameters = sum(int(v.shape.num_elements()) for v in model.trainable_variables)
    iterator = iter(dataset)

    @tf.function
    def run(steps):
        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            features, labels = next(iterator)
            with tf.GradientTape() as tape:
                loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, model(features))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    loss = None
    for _ in range(args.steps // args.iterations_per_loop):
        loss = run(tf.constant(args.iterations_per_loop)).numpy()
        timer.after_run(None, None)
    timer.final_loss = float(loss)


def make_input_fn(x_train, y_train):
    """input_fn(params): per-replica batches of params['batch_size'], endless (one train() call
    runs many epochs), reshuffled every epoch, prefetched."""
    def input_fn(params):
        return (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                .shuffle(len(x_train), seed=1, reshuffle_each_iteration=True)
                .repeat()
                .batch(params["batch_size"], drop_remainder=True)
                .prefetch(tf.data.AUTOTUNE))
    return input_fn


# ---- timing ------------------------------------------------------------------------------------
class RunTimer(tf.compat.v1.train.SessionRunHook):
    """Wall-clock time after every Session.run of the train() call, and the model's size."""

    def __init__(self) -> None:
        self.after_run_times: List[float] = []
        self.after_run_cpu: List[float] = []  # this process's CPU seconds (all threads)
        self.trainable_parameters = 0

    def begin(self) -> None:
        seen = set()
        for variable in tf.compat.v1.trainable_variables():
            name = variable.name.split(":")[0]
            if name not in seen:  # a mirrored variable may be listed once per component
                seen.add(name)
                self.trainable_parameters += int(variable.shape.num_elements())

    def after_run(self, run_context, run_values) -> None:
        self.after_run_times.append(time.perf_counter())
        self.after_run_cpu.append(time.process_time())


class FinalLoss(logging.Handler):
    """Catches tf.estimator's 'Loss for final step: X.' (the loss fetched by the last run)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.value: Optional[float] = None

    def emit(self, record: logging.LogRecord) -> None:
        match = re.match(r"Loss for final step: (\S+?)\.?$", record.getMessage())
        if match:
            self.value = float(match.group(1))


# ---- the run -----------------------------------------------------------------------------------
def build_estimator(args: argparse.Namespace, model_dir: str, session_config
                    ) -> tf.estimator.Estimator:
    common = dict(model_dir=model_dir, session_config=session_config, tf_random_seed=1,
                  log_step_count_steps=None, save_summary_steps=None,
                  # one checkpoint at the end (when the session closes: after the timed window)
                  save_checkpoints_steps=args.steps, keep_checkpoint_max=1)
    params = {"learning_rate": args.learning_rate}
    if args.variant == "plain":
        return tf.estimator.Estimator(plain_model_fn, config=tf.estimator.RunConfig(**common),
                                      params={**params, "batch_size": args.global_batch})
    config = ipu.ipu_run_config.RunConfig(
        ipu_run_config=ipu.ipu_run_config.IPURunConfig(
            iterations_per_loop=args.iterations_per_loop),
        train_distribute=strategies.PopDistStrategy(), **common)
    return ipu.ipu_estimator.IPUEstimator(cnn_estimator.model_fn, config=config, params=params,
                                          train_batch_size=args.global_batch)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    steps_per_run = args.iterations_per_loop if args.variant != "plain" else 1
    if args.steps % steps_per_run or args.steps // steps_per_run < 3:
        raise SystemExit(f"--steps {args.steps} must be a multiple of {steps_per_run} "
                         f"(steps per Session.run), at least 3 runs")
    if args.window_steps % steps_per_run:
        raise SystemExit(f"--window-steps {args.window_steps} must be a multiple of "
                         f"{steps_per_run} (steps per Session.run)")
    ctx = runtime.context()
    if args.variant != "ipu" and ctx.num_instances > 1:
        raise SystemExit(f"the {args.variant} variant runs as one process")
    (x_train, y_train), _ = _digits.load()
    x_train = x_train.reshape(-1, 8, 8, 1)
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=args.intra_op_threads,
        inter_op_parallelism_threads=args.inter_op_threads)
    final_loss = FinalLoss()
    tf_logger = tf.get_logger()
    for handler in tf_logger.handlers:  # keep tf.estimator's INFO lines off stderr
        handler.setLevel(logging.WARNING)
    tf_logger.addHandler(final_loss)
    tf_logger.setLevel(logging.INFO)

    timer = RunTimer()
    train_started = time.perf_counter()
    if args.variant == "ceiling":
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
        train_ceiling(args, make_input_fn(x_train, y_train)({"batch_size": args.global_batch}),
                      timer)
    else:
        estimator = build_estimator(args, args.model_dir, session_config)
        estimator.train(make_input_fn(x_train, y_train), hooks=[timer], steps=args.steps)
    train_s = time.perf_counter() - train_started

    times = timer.after_run_times
    if ctx.instance_index != 0:
        return 0
    # Steady state: from the end of the first Session.run to the end of the last one.
    runs = len(times) - 1
    timed_s = times[-1] - times[0]
    intervals = [b - a for a, b in zip(times, times[1:])]
    # Consecutive windows of --window-steps steps: the same amount of work whatever the steps
    # per run, so their median is comparable across configurations and barely moved by bursts
    # of load from other jobs.
    per_window = args.window_steps // steps_per_run
    windows = [times[i + per_window] - times[i] for i in range(0, runs - per_window + 1,
                                                                 per_window)]
    steps = runs * steps_per_run
    cpu_s = timer.after_run_cpu[-1] - timer.after_run_cpu[0]
    result: Dict[str, Any] = {
        "variant": args.variant,
        "iterations_per_loop": steps_per_run,
        "num_instances": ctx.num_instances,
        "global_batch": args.global_batch,
        "per_replica_batch": args.global_batch // ctx.num_total_replicas,
        "session_runs": len(times),
        "timed_steps": steps,
        "timed_s": timed_s,
        "steps_per_s": steps / timed_s,
        "samples_per_s": steps * args.global_batch / timed_s,
        "median_run_s": statistics.median(intervals),
        "slowest_run_s": max(intervals),
        "window_steps": args.window_steps,
        "windows": len(windows),
        "median_window_steps_per_s": (args.window_steps / statistics.median(windows)
                                      if windows else None),
        "cpu_s_per_step": cpu_s / steps,  # instance 0's CPU time, every thread
        "first_run_done_s": times[0] - _STARTED,  # process start to the end of the first run
        "import_s": _IMPORTED_S,
        "train_call_s": train_s,
        "trainable_parameters": timer.trainable_parameters,
        "final_loss": getattr(timer, "final_loss", final_loss.value),
    }
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
