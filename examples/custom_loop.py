"""A custom training loop under strategy.scope(), the way IPU-era code writes it.

    poprun-lite -np 2 --num-replicas 4 examples/custom_loop.py --strategy popdist

Under PopDistStrategy and IPUHorovodStrategy each instance takes its shard of the data (they
never shard behind the program's back, as Graphcore's) and batches it per replica: each replica
reads its own batches, so a step trains on the per-replica batch x all replicas.
IPUMultiWorkerStrategy auto-shards and splits global batches, as TensorFlow's. The loss is
divided by the *global* batch size and gradients are summed over all replicas, so the result does
not depend on how many instances or replicas share the work. Instance 0 prints per-epoch loss,
accuracy and samples/s, and (with --model-dir) is the only one to write checkpoints.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

import _digits  # noqa: E402
import popdist_launcher  # noqa: E402
from popdist_launcher import strategies  # noqa: E402

STRATEGIES = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
              "multi-worker": "IPUMultiWorkerStrategy"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="popdist")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--model-dir", default=None, help="checkpoint here (instance 0 only)")
    args = parser.parse_args()

    ctx = popdist_launcher.init()
    strategy = getattr(strategies, STRATEGIES[args.strategy])()
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        print(f"--batch-size {args.batch_size} is not divisible by {replicas} replicas; use a "
              f"multiple of {replicas}.", file=sys.stderr)
        return 2
    (x_train, y_train), (x_test, y_test) = _digits.load()
    steps = len(x_train) // args.batch_size
    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
             .shuffle(len(x_train), seed=1, reshuffle_each_iteration=True))  # same order everywhere
    if args.strategy == "multi-worker":
        train = train.batch(args.batch_size, drop_remainder=True)
    else:
        train = (train.shard(ctx.num_instances, ctx.instance_index)
                 .batch(args.batch_size // replicas, drop_remainder=True))  # per replica
    dist_train = strategy.experimental_distribute_dataset(train)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input((64,)),
                                     tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(10)])
        optimizer = tf.keras.optimizers.SGD(args.learning_rate, momentum=0.9)
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy()  # sync-on-read: global on read
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

    @tf.function
    def train_step(x, y):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = tf.keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(y, logits)
            return loss
        return strategy.reduce("SUM", strategy.run(replica_fn, args=(x, y)), axis=None)

    manager = None
    if args.model_dir and strategy.extended.should_checkpoint:
        manager = tf.train.CheckpointManager(checkpoint, args.model_dir, max_to_keep=2)
    for epoch in range(args.epochs):
        accuracy.reset_state()
        start, total = time.perf_counter(), 0.0
        for x, y in dist_train:
            total += float(train_step(x, y))
        elapsed = time.perf_counter() - start
        acc = float(accuracy.result())  # a collective: every instance reads it
        if ctx.instance_index == 0:
            print(f"epoch {epoch + 1:3d}  loss {total / steps:.4f}  accuracy {acc:.4f}  "
                  f"{steps * args.batch_size / elapsed:8.0f} samples/s", flush=True)
        if manager is not None:
            manager.save(checkpoint_number=epoch + 1)
    test_accuracy = float(tf.reduce_mean(tf.cast(
        tf.argmax(model(x_test), 1) == y_test, tf.float32)))
    if ctx.instance_index == 0:
        print(f"test accuracy {test_accuracy:.4f}; {ctx.num_instances} instance(s), {replicas} "
              f"replica(s), strategy {args.strategy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
