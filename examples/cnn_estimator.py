"""A CNN trained with the IPUEstimator, written as IPU-era code writes it; the README's main job.

    poprun-lite -np 4 examples/cnn_estimator.py                 # 4 instances, digits
    poprun-lite -np 2 --num-replicas 4 examples/cnn_estimator.py --strategy horovod
    poprun-lite -np 2 examples/cnn_estimator.py --strategy multi-worker   # TF collectives
    python examples/cnn_estimator.py                            # one process, same result

--batch-size is the global batch: every replica of every instance gets params['batch_size'] of
it, each instance reads its shard of the data (the input_fns shard by instance index, as
Graphcore's documentation says: the estimator shards nothing itself), and gradients are
averaged over all replicas, so the weights do not depend on how the work is split. Each epoch prints
loss, test accuracy and samples/s. Digits come with scikit-learn; CIFAR-10 is read from a local copy
of its python batches (--data-dir).
"""
from __future__ import annotations

import argparse
import logging
import os
import pickle
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This program uses the TF1-era estimator API on purpose (as IPU-era code does): TensorFlow's
# notices that those APIs are deprecated, repeated by every instance, would bury the results.
# Every other warning still shows.
warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed",
                        category=UserWarning)
warnings.filterwarnings("ignore", message=r"Passing \(type, 1\) or '1type' as a synonym",
                        category=FutureWarning)  # TensorFlow 2.15's own dtypes with NumPy 1.26

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


class _NoDeprecationNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "is deprecated and will be removed" not in record.getMessage()


tf.get_logger().addFilter(_NoDeprecationNotices())

import popdist_launcher  # noqa: E402
from popdist_launcher import ipu, strategies  # noqa: E402

STRATEGIES = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
              "multi-worker": "IPUMultiWorkerStrategy"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32, help="global batch size")
    parser.add_argument("--batches-per-step", type=int, default=4,
                        help="training steps per Session.run (iterations_per_loop)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--test-only", action="store_true",
                        help="only evaluate the latest checkpoint in --model-dir")
    parser.add_argument("--model-dir", default=None,
                        help="checkpoints (default: a new temporary folder, shared by instances)")
    parser.add_argument("--profile", action="store_true",
                        help="write a TensorFlow profile of one epoch to MODEL_DIR/profile")
    parser.add_argument("--dataset", choices=["digits", "cifar10"], default="digits")
    parser.add_argument("--data-dir", default=None,
                        help="folder with CIFAR-10's data_batch_1..5 and test_batch")
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="popdist")
    parser.add_argument("--min-accuracy", type=float, default=None,
                        help="exit 1 if the final test accuracy is lower")
    return parser.parse_args()


def load_dataset(args):
    if args.dataset == "digits":
        import _digits
        (x_train, y_train), (x_test, y_test) = _digits.load()
        return (x_train.reshape(-1, 8, 8, 1), y_train), (x_test.reshape(-1, 8, 8, 1), y_test)
    if not args.data_dir or not os.path.isfile(os.path.join(args.data_dir, "test_batch")):
        raise SystemExit("--dataset cifar10 needs --data-dir pointing at a folder with "
                         "CIFAR-10's python batches (data_batch_1..5, test_batch).")

    def read(name):
        with open(os.path.join(args.data_dir, name), "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        x = batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype("float32") / 255
        return x, np.array(batch[b"labels"], dtype="int64")

    parts = [read(f"data_batch_{i}") for i in range(1, 6)]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return train, read("test_batch")


def init(seed):
    # An explicit seed per layer: the initial weights then depend on tf_random_seed and this seed
    # only, not on how many ops were created before (which differs with the strategy and -np).
    return tf.compat.v1.glorot_uniform_initializer(seed=seed)


def model_fn(features, labels, mode, params):
    x = tf.compat.v1.layers.conv2d(features, 32, 3, padding="same", activation=tf.nn.relu,
                                   kernel_initializer=init(1))
    x = tf.compat.v1.layers.conv2d(x, 64, 3, padding="same", activation=tf.nn.relu,
                                   kernel_initializer=init(2))
    x = tf.compat.v1.layers.max_pooling2d(x, 2, 2)
    x = tf.compat.v1.layers.flatten(x)
    x = tf.compat.v1.layers.dense(x, 128, activation=tf.nn.relu, kernel_initializer=init(3))
    logits = tf.compat.v1.layers.dense(x, 10, kernel_initializer=init(4))
    if mode == tf.estimator.ModeKeys.PREDICT:
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, predictions={"class": tf.argmax(logits, 1)})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        def metric_fn(labels, logits):
            return {"accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, 1))}
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss,
                                                  eval_metrics=(metric_fn, [labels, logits]))
    optimizer = ipu.optimizers.CrossReplicaOptimizer(
        tf.compat.v1.train.MomentumOptimizer(params["learning_rate"], momentum=0.9))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def main() -> int:
    args = parse_args()
    ctx = popdist_launcher.init()
    (x_train, y_train), (x_test, y_test) = load_dataset(args)
    steps_per_epoch = len(x_train) // args.batch_size
    steps_per_epoch -= steps_per_epoch % args.batches_per_step
    strategy = getattr(strategies, STRATEGIES[args.strategy])()
    replicas = strategy.num_replicas_in_sync
    # An evaluation batch that divides the test set and the replicas: every image counted once.
    eval_batch = next((b for b in range(2 * args.batch_size, 0, -1)
                       if len(x_test) % b == 0 and b % replicas == 0), replicas)
    # Without --model-dir the estimator uses one folder for the whole job (every instance).
    config = ipu.ipu_run_config.RunConfig(
        ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=args.batches_per_step),
        train_distribute=strategy, model_dir=args.model_dir,
        save_checkpoints_steps=steps_per_epoch,
        log_step_count_steps=None, tf_random_seed=1)
    estimator = ipu.ipu_estimator.IPUEstimator(
        model_fn, config=config, params={"learning_rate": args.learning_rate},
        train_batch_size=args.batch_size, eval_batch_size=eval_batch)

    def train_input_fn(params, epoch=0):
        # The same order on every instance, then this instance's shard of it.
        return (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                .shuffle(len(x_train), seed=epoch)
                .shard(ctx.num_instances, ctx.instance_index).batch(params["batch_size"]))

    def eval_input_fn(params):
        return (tf.data.Dataset.from_tensor_slices((x_test, y_test))
                .shard(ctx.num_instances, ctx.instance_index).batch(params["batch_size"]))

    def say(message: str) -> None:
        if ctx.instance_index == 0:
            print(message, flush=True)

    say(f"{args.dataset}: {len(x_train)} training and {len(x_test)} test images; "
        f"{ctx.num_instances} instance(s), {replicas} replica(s), global batch "
        f"{args.batch_size}, {args.batches_per_step} step(s) per run, strategy {args.strategy}")
    if args.test_only:
        result = estimator.evaluate(eval_input_fn)
        say(f"test accuracy {result['accuracy']:.4f}  loss {result['loss']:.4f}")
        return 0
    if args.profile:
        tf.profiler.experimental.start(os.path.join(estimator.model_dir, "profile"))
    accuracy = 0.0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        estimator.train(lambda params, e=epoch: train_input_fn(params, e), steps=steps_per_epoch)
        elapsed = time.perf_counter() - start
        result = estimator.evaluate(eval_input_fn)
        accuracy = float(result["accuracy"])
        say(f"epoch {epoch + 1:3d}  loss {result['loss']:.4f}  test accuracy {accuracy:.4f}  "
            f"{steps_per_epoch * args.batch_size / elapsed:8.0f} samples/s")
        if args.profile and epoch == 0:
            tf.profiler.experimental.stop()
    say(f"final test accuracy {accuracy:.4f}")
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        print(f"test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
