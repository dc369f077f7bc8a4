"""One configuration of benchmarks/compiled_loops.py: trains a small CNN in an on-device loop
written as Graphcore's TensorFlow 2 guide writes it, and writes its timing as JSON.

usage: _compiled_loop_worker.py VARIANT OUT_JSON --steps-per-call N --calls N --warmup-calls N

VARIANT (see compiled_loops.py): ipu-iterator-{jit,nojit}, ipu-infeed-{jit,nojit},
stock-step-{xla,nojit}.
"""
import argparse
import json
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

parser = argparse.ArgumentParser()
parser.add_argument("variant")
parser.add_argument("out")
parser.add_argument("--steps-per-call", type=int, default=50)
parser.add_argument("--calls", type=int, default=20)
parser.add_argument("--warmup-calls", type=int, default=2)
parser.add_argument("--batch", type=int, default=32)
args = parser.parse_args()
family, _, mode = args.variant.rpartition("-")
jit = mode in ("jit", "xla")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(2)
rng = np.random.default_rng(0)
images = rng.normal(size=(1024, 8, 8, 1)).astype(np.float32)
labels = rng.integers(0, 10, size=1024).astype(np.int32)
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
    args.batch, drop_remainder=True).prefetch(16)


def make_model():
    tf.keras.utils.set_random_seed(1)  # the same weights in every variant
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10)])


cross_entropy = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.SUM)


def loss_fn(y, logits):
    return cross_entropy(y, logits) / args.batch

def make_step(model, optimizer):
    """One training step on a batch; returns its loss."""
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss
    return step


if family.startswith("ipu"):
    from tensorflow.python import ipu

    config = ipu.config.IPUConfig()
    config.auto_select_ipus = 1
    config.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        step = make_step(make_model(), tf.keras.optimizers.SGD(0.01, momentum=0.9))

        if family == "ipu-iterator":
            iterator = iter(dataset)

            @tf.function(jit_compile=jit)
            def loop():
                for _ in tf.range(args.steps_per_call):
                    loss = strategy.run(step, args=next(iterator))
                return loss

            def call():
                return loop()
        else:
            infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
            outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

            def body(x, y):
                return outfeed.enqueue(step(x, y))

            @tf.function(jit_compile=jit)
            def loop():
                ipu.loops.repeat(args.steps_per_call, body, infeed_queue=infeed)

            def call():
                strategy.run(loop)
                return outfeed.dequeue()[-1]
else:  # stock TensorFlow, no IPU layer: XLA compiles the step itself (no host op inside)
    step = tf.function(make_step(make_model(), tf.keras.optimizers.SGD(0.01, momentum=0.9)),
                       jit_compile=jit)
    iterator = iter(dataset)

    def call():
        for _ in range(args.steps_per_call):
            loss = step(*next(iterator))
        return loss

for _ in range(args.warmup_calls):
    float(call())
cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
times = []
for _ in range(args.calls):
    start = time.perf_counter()
    last = float(call())
    times.append(time.perf_counter() - start)
wall = time.perf_counter() - t0
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
steps = args.calls * args.steps_per_call
with open(args.out, "w") as f:
    json.dump({"variant": args.variant, "steps": steps, "wall_s": wall,
               "steps_per_s": steps / wall,
               "median_call_steps_per_s": args.steps_per_call / float(np.median(times)),
               "cpu_ms_per_step": 1000 * ((cpu1.ru_utime + cpu1.ru_stime)
                                          - (cpu0.ru_utime + cpu0.ru_stime)) / steps,
               "last_loss": last}, f)
