"""Keras Model.compile / fit / evaluate under PopDistStrategy, across instances.

    poprun-lite -np 2 examples/keras_fit.py

Each instance shards the data by its index (PopDistStrategy, like Graphcore's, never shards
behind the program's back) and batches it per replica: each replica reads its own batches, as on
Graphcore's systems, so a step trains on the per-replica batch x all replicas and an epoch has
(batches in the shard) / (local replicas) steps. Graphcore's IPUMultiWorkerStrategy never
supported fit; PopDistStrategy does.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

import _digits  # noqa: E402
import popdist_launcher  # noqa: E402
from popdist_launcher.strategies import PopDistStrategy  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args()

    ctx = popdist_launcher.init()
    strategy = PopDistStrategy()
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        print(f"--batch-size {args.batch_size} is not divisible by {replicas} replicas; use a "
              f"multiple of {replicas}.", file=sys.stderr)
        return 2
    (x_train, y_train), (x_test, y_test) = _digits.load()
    per_replica = args.batch_size // replicas
    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
             .shuffle(len(x_train), seed=1)  # the same order on every instance, then its shard
             .shard(ctx.num_instances, ctx.instance_index)
             .batch(per_replica, drop_remainder=True))
    # Every replica's batches the same size (as IPU infeeds need): the few test samples left
    # over are not evaluated.
    test = (tf.data.Dataset.from_tensor_slices((x_test, y_test))
            .shard(ctx.num_instances, ctx.instance_index).batch(per_replica, drop_remainder=True))

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input((64,)),
                                     tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.SGD(args.learning_rate, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(train, epochs=args.epochs, verbose=2 if ctx.instance_index == 0 else 0)
    loss, accuracy = model.evaluate(test, verbose=0)
    if ctx.instance_index == 0:
        print(f"test accuracy {accuracy:.4f} (loss {loss:.4f}); {ctx.num_instances} instance(s), "
              f"{strategy.num_replicas_in_sync} replica(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
