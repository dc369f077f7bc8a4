"""Data-parallel training of a small classifier on scikit-learn's 8x8 digits, across instances.

Run it under the launcher:  poprun-lite -np 4 examples/horovod_digits.py
Each instance trains on its slice of every global batch; gradients are summed across instances
with Horovod's allreduce, so N instances compute exactly what one process would on the global
batch. Instance 0 prints per-epoch loss, accuracy and samples/s; every instance checks that its
weights equal instance 0's at the end.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import popdist_launcher  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--min-accuracy", type=float, default=0.9,
                        help="exit 1 when the final test accuracy is lower")
    return parser.parse_args()


def load_data(seed: int = 0):
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = 360
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main() -> int:
    args = parse_args()
    ctx = popdist_launcher.init()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if args.batch_size % size:
        print(f"--batch-size {args.batch_size} is not divisible by {size} instances; use a "
              f"multiple of {size}.", file=sys.stderr)
        return 2
    local_batch = args.batch_size // size
    (x_train, y_train), (x_test, y_test) = load_data()
    steps_per_epoch = len(x_train) // args.batch_size

    tf.random.set_seed(1234 + rank)  # different on purpose: the broadcast makes them equal
    model = tf.keras.Sequential([
        tf.keras.layers.Input((64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    optimizer = tf.keras.optimizers.SGD(args.learning_rate, momentum=0.9)
    hvd.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = tf.keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True)
            loss = tf.reduce_sum(per_example) / args.batch_size  # divide by the *global* batch
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [hvd.allreduce(g, op=hvd.Sum) for g in grads]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.float32))
        return hvd.allreduce(loss, op=hvd.Sum), hvd.allreduce(correct, op=hvd.Sum)

    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch).permutation(len(x_train))  # same on every instance
        start = time.perf_counter()
        loss_sum = correct_sum = 0.0
        for step in range(steps_per_epoch):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            mine = batch[rank * local_batch:(rank + 1) * local_batch]
            loss, correct = train_step(x_train[mine], y_train[mine])
            loss_sum += float(loss)
            correct_sum += float(correct)
        elapsed = time.perf_counter() - start
        if rank == 0:
            seen = steps_per_epoch * args.batch_size
            print(f"epoch {epoch + 1:3d}  loss {loss_sum / steps_per_epoch:.4f}  "
                  f"accuracy {correct_sum / seen:.4f}  {seen / elapsed:8.0f} samples/s", flush=True)

    accuracy = float(np.mean(np.argmax(model(x_test).numpy(), 1) == y_test))
    checksum = tf.constant([float(sum(np.sum(v.numpy(), dtype=np.float64)
                                      for v in model.variables))])
    checksums = hvd.allgather(checksum).numpy()
    identical = bool(np.all(checksums == checksums[0]))
    if rank == 0:
        print(f"test accuracy {accuracy:.4f} on {len(x_test)} images; {size} instance(s), "
              f"{ctx.num_total_replicas} replica(s); weights identical on every instance: "
              f"{identical}")
    if not identical:
        print(f"instance {rank}: weights differ from instance 0's", file=sys.stderr)
        return 1
    if accuracy < args.min_accuracy:
        print(f"test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
