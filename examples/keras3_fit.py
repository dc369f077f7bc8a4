"""A Keras 3 program (TensorFlow 2.21's own Keras): Model.fit / evaluate across instances under
any of the three strategies.

    poprun-lite -np 2 examples/keras3_fit.py
    poprun-lite -np 2 examples/keras3_fit.py --strategy multi-worker

It imports ``keras`` (Keras 3 here: the program names no IPU module, Horovod's API,
estimator or TensorFlow 1 module, so it gets TensorFlow's own Keras) and uses Keras 3's API
(``keras.ops`` in a layer of its own). Keras 3's optimizer sums the replicas' gradients through
the strategy, so every instance ends with the same weights. PopDistStrategy and
IPUHorovodStrategy take each instance's shard batched per replica; IPUMultiWorkerStrategy takes
the whole dataset batched globally and shards it itself.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import _digits  # noqa: E402
import popdist_launcher  # noqa: E402
from popdist_launcher import strategies  # noqa: E402

STRATEGIES = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
              "multi-worker": "IPUMultiWorkerStrategy"}


class Standardize(keras.layers.Layer):
    """Each sample scaled to zero mean and unit variance, with Keras 3's backend-neutral ops."""

    def call(self, x):
        mean = keras.ops.mean(x, axis=-1, keepdims=True)
        return (x - mean) / (keras.ops.std(x, axis=-1, keepdims=True) + 1e-6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="popdist")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    args = parser.parse_args()
    if not keras.__version__.startswith("3."):
        print(f"this example is a Keras 3 program, and it has Keras {keras.__version__}: run it "
              f"on TensorFlow 2.16+ without TF_USE_LEGACY_KERAS=1.", file=sys.stderr)
        return 2

    ctx = popdist_launcher.init()
    strategy = getattr(strategies, STRATEGIES[args.strategy])()
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        print(f"--batch-size {args.batch_size} is not divisible by {replicas} replicas; use a "
              f"multiple of {replicas}.", file=sys.stderr)
        return 2
    (x_train, y_train), (x_test, y_test) = _digits.load()
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=1)
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test))
    if args.strategy == "multi-worker":  # global batches; the strategy shards them
        train = train.batch(args.batch_size, drop_remainder=True)
        test = test.batch(args.batch_size, drop_remainder=True)
    else:  # this instance's shard, in per-replica batches
        per_replica = args.batch_size // replicas
        train = train.shard(ctx.num_instances, ctx.instance_index).batch(per_replica,
                                                                         drop_remainder=True)
        test = test.shard(ctx.num_instances, ctx.instance_index).batch(per_replica,
                                                                       drop_remainder=True)

    with strategy.scope():
        keras.utils.set_random_seed(ctx.instance_index)  # different on each: instance 0's win
        model = keras.Sequential([keras.Input((64,)), Standardize(),
                                  keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(args.learning_rate, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(train, epochs=args.epochs, verbose=2 if ctx.instance_index == 0 else 0)
    loss, accuracy = model.evaluate(test, verbose=0)
    checksum = sum(float(np.abs(w).sum()) for w in model.get_weights())
    print(f"instance {ctx.instance_index}: weights checksum {checksum:.6f}")
    if ctx.instance_index == 0:
        print(f"test accuracy {accuracy:.4f} (loss {loss:.4f}); Keras {keras.__version__}, "
              f"{args.strategy}, {ctx.num_instances} instance(s), {replicas} replica(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
