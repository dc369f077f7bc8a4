"""One instance of a training-throughput run; started by benchmarks/training_throughput.py.

usage: _throughput_worker.py --variant VARIANT[,VARIANT...] --result FILE [options]

Every instance builds the same small CNN, trains it with the data-parallel engine VARIANT names
for ``--warmup`` uncounted steps, synchronises all instances, then times ``--steps`` training
steps on the wall clock. Instance 0 writes the result (samples/s and per-step times) as JSON to
``--result``. The variants:

* ``popdist``, ``ipu-horovod``, ``ipu-multi-worker``: popdist_launcher's PopDistStrategy,
  IPUHorovodStrategy and IPUMultiWorkerStrategy (started under poprun-lite);
* ``horovod``: plain Horovod, ``hvd.DistributedGradientTape`` (started under horovodrun);
* ``mwms``: plain ``tf.distribute.MultiWorkerMirroredStrategy`` (under poprun-lite, which writes
  TF_CONFIG).

The strategy variants use the usual custom loop: ``strategy.run`` inside a ``tf.function`` that
also takes the next element of a ``distribute_datasets_from_function`` iterator, and
``tf.nn.compute_average_loss`` over the global batch. Plain Horovod averages the gradients of each
instance's mean loss, which is the same gradient. Each step returns the per-instance loss without a
cross-replica reduction, so every variant does exactly one gradient all-reduce per step.

The ``-fit`` variants train the same model with Keras ``model.fit`` (compiled SGD, the same loss):
under the strategy (datasets per replica for PopDistStrategy and IPUHorovodStrategy, as Graphcore's;
a global batch for the multi-worker ones, not sharded again), or for ``horovod-fit`` with
``horovod.tensorflow.keras``' DistributedOptimizer and BroadcastGlobalVariablesCallback. A Keras
callback stamps every batch's end; the timed steps are one ``fit`` of ``--steps`` steps after an
untimed ``fit`` of ``--warmup`` steps.

With several variants (``--variant horovod,popdist,ipu-horovod``, the custom loops over Horovod,
or ``horovod-fit,popdist-fit,ipu-horovod-fit``, the same engines under Keras fit: what one process
can hold together; benchmarks/turns_throughput.py), every instance builds each of them, warms
each up, then times them in turns: ``--steps`` steps of each in ``--blocks`` blocks (a fit of
that many steps for the fit variants), the order reversed every other block. The result holds
every block's samples/s and CPU time per step per variant, each variant's last loss and a digest
of its trained weights (their sum of squares).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import importlib.util
import os
import resource
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Keras 2, as the numbers in the docs were measured (TF_USE_LEGACY_KERAS=0 measures Keras 3).
if importlib.util.find_spec("tf_keras"):  # TensorFlow 2.16+ (2.15 has Keras 2 only)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_IMPORT_STARTED = time.perf_counter()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_IMPORT_S = time.perf_counter() - _IMPORT_STARTED

LOOP_VARIANTS = ("popdist", "ipu-horovod", "ipu-multi-worker", "horovod", "mwms")
# The same engines under Keras ``fit`` (plain Horovod: its Keras DistributedOptimizer and
# BroadcastGlobalVariablesCallback).
VARIANTS = LOOP_VARIANTS + tuple(f"{v}-fit" for v in LOOP_VARIANTS)
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
DISTINCT_BATCHES = 4  # per replica; cached and repeated, so the input pipeline costs ~nothing


# The engines over Horovod: one process can hold them all, so they can take turns in it (custom
# loops together, or Keras fit variants together).
IN_TURN_LOOPS = ("horovod", "popdist", "ipu-horovod")
IN_TURN_FIT = tuple(f"{v}-fit" for v in IN_TURN_LOOPS)


def variant_list(text: str) -> List[str]:
    """``--variant``: one variant, or several of IN_TURN_LOOPS or of IN_TURN_FIT (no repeats)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {unknown or text!r}; choose from "
                                         + ", ".join(VARIANTS))
    if len(names) > 1 and (len(set(names)) != len(names) or not (
            set(names) <= set(IN_TURN_LOOPS) or set(names) <= set(IN_TURN_FIT))):
        raise argparse.ArgumentTypeError(
            f"variants taking turns must be distinct ones of {', '.join(IN_TURN_LOOPS)} or of "
            f"{', '.join(IN_TURN_FIT)}; got {text!r}")
    return names


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", type=variant_list, required=True,
                        help="one of " + ", ".join(VARIANTS) + "; or several of "
                             + ", ".join(IN_TURN_LOOPS) + " (or of " + ", ".join(IN_TURN_FIT)
                             + "), comma-separated, timed in the same processes in turns "
                             "(--blocks)")
    parser.add_argument("--blocks", type=int, default=1,
                        help="with several variants: each one's timed steps in this many blocks, "
                             "the variants taking turns block by block")
    parser.add_argument("--result", required=True, help="instance 0 writes its JSON result here")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--inter-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--profile-dir", default=None,
                        help="after the timed steps, trace --profile-steps more with TensorFlow's "
                             "profiler into this folder (instance 0; benchmarks/step_profile.py)")
    parser.add_argument("--profile-steps", type=int, default=20)
    return parser.parse_args(argv)


def build_model() -> tf.keras.Model:
    """conv 3x3x16 - relu - maxpool - conv 3x3x32 - relu - global average pool - dense 10."""
    return tf.keras.Sequential([
        tf.keras.layers.Input(IMAGE_SHAPE),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(NUM_CLASSES),
    ])


def make_dataset(batch_size: int, seed: int, replica_index: int) -> tf.data.Dataset:
    """Random images and labels, already batched, generated in memory for one replica."""
    rng = np.random.default_rng([seed, replica_index])
    images = rng.standard_normal((DISTINCT_BATCHES, batch_size) + IMAGE_SHAPE, dtype=np.float32)
    labels = rng.integers(0, NUM_CLASSES, (DISTINCT_BATCHES, batch_size), dtype=np.int64)
    return (tf.data.Dataset.from_tensor_slices((images, labels))
            .cache().repeat().prefetch(tf.data.AUTOTUNE))


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


@dataclasses.dataclass
class Trainer:
    """What the timing loop needs: one training step, a barrier, and who this instance is."""

    rank: int
    size: int
    num_replicas: int
    step: Callable[[], tf.Tensor]        # runs one step; returns this instance's mean loss
    barrier: Callable[[], float]         # a collective over all replicas; returns their count
    digest: Callable[[], float]          # the trained weights' sum of squares
    fit: Optional[Callable[[int, list], Dict[str, float]]] = None  # Keras fit of N steps


def weights_digest(model: tf.keras.Model) -> Callable[[], float]:
    """The sum of squares of ``model``'s trainable weights, read back as one number."""
    return lambda: float(sum(tf.reduce_sum(tf.square(tf.convert_to_tensor(w)))
                             for w in model.trainable_variables))


def make_strategy(variant: str) -> "tuple[tf.distribute.Strategy, int, int]":
    """The strategy a variant names, with this instance's rank and the number of instances."""
    if variant == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = strategy.cluster_resolver
        return strategy, resolver.task_id or 0, strategy.extended._num_workers  # noqa: SLF001
    import popdist_launcher
    from popdist_launcher import strategies

    ctx = popdist_launcher.init()
    cls = {"popdist": strategies.PopDistStrategy, "ipu-horovod": strategies.IPUHorovodStrategy,
           "ipu-multi-worker": strategies.IPUMultiWorkerStrategy}[variant]
    return cls(), ctx.instance_index, ctx.num_instances


def strategy_trainer(variant: str, args: argparse.Namespace) -> Trainer:
    """A custom training loop under one of the tf.distribute strategies."""
    strategy, rank, size = make_strategy(variant)
    replicas = strategy.num_replicas_in_sync
    global_batch = args.global_batch

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = input_context.get_per_replica_batch_size(global_batch)
        # One replica per instance here, so the pipeline id is the replica index.
        return make_dataset(per_replica, args.seed, input_context.input_pipeline_id)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.SGD(args.learning_rate)

    @tf.function
    def train_step(iterator) -> tf.Tensor:
        def replica_fn(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = tf.nn.compute_average_loss(per_example_loss(labels, logits),
                                                  global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        images, labels = next(iterator)
        per_replica_loss = strategy.run(replica_fn, args=(images, labels))
        # compute_average_loss divided the replica's sum by the global batch, i.e. by `replicas`
        # times the replica's batch: scale back to this replica's mean loss. In the step, so each
        # step costs the loop one function call, as plain Horovod's does.
        return strategy.experimental_local_results(per_replica_loss)[0] * replicas

    # A cross-replica SUM of a per-replica 1: a real collective under every strategy.
    ones = strategy.experimental_distribute_values_from_function(lambda _: tf.ones([]))

    @tf.function
    def all_replicas() -> tf.Tensor:
        return strategy.reduce("SUM", ones, axis=None)

    def barrier() -> float:
        return float(all_replicas())

    return Trainer(rank, size, replicas, step=lambda: train_step(iterator), barrier=barrier,
                   digest=weights_digest(model))


def horovod_trainer(args: argparse.Namespace) -> Trainer:
    """Plain Horovod: DistributedGradientTape averages each instance's gradients."""
    import horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    per_instance = args.global_batch // size
    iterator = iter(make_dataset(per_instance, args.seed, rank))
    model = build_model()
    optimizer = tf.keras.optimizers.SGD(args.learning_rate)
    hvd.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def train_step(iterator) -> tf.Tensor:
        images, labels = next(iterator)
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(per_example_loss(labels, logits))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def all_ranks() -> tf.Tensor:
        return hvd.allreduce(tf.ones([]), op=hvd.Sum)

    return Trainer(rank, size, size, step=lambda: train_step(iterator),
                   barrier=lambda: float(all_ranks()), digest=weights_digest(model))


class Usage:
    """This process's CPU time (all threads, user and system) and minor page faults over a span."""

    def __enter__(self) -> "Usage":
        self._start = resource.getrusage(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *exc) -> None:
        end = resource.getrusage(resource.RUSAGE_SELF)
        self.user_s = end.ru_utime - self._start.ru_utime
        self.system_s = end.ru_stime - self._start.ru_stime
        self.minor_faults = end.ru_minflt - self._start.ru_minflt

    def per_step(self, steps: int) -> Dict[str, float]:
        return {"cpu_user_ms_per_step": 1e3 * self.user_s / steps,
                "cpu_system_ms_per_step": 1e3 * self.system_s / steps,
                "minor_faults_per_step": self.minor_faults / steps}


def fit_trainer(variant: str, args: argparse.Namespace) -> Trainer:
    """Keras ``fit`` under a strategy, or (``horovod-fit``) with Horovod's Keras wrappers."""
    engine = variant[:-len("-fit")]
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    callbacks: list = []
    if engine == "horovod":
        import horovod.tensorflow.keras as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        dataset = make_dataset(args.global_batch // size, args.seed, rank)
        model = build_model()
        model.compile(hvd.DistributedOptimizer(tf.keras.optimizers.SGD(args.learning_rate)),
                      loss=loss)
        callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
        replicas = size
        import horovod.tensorflow as hvd_tf

        all_ranks = tf.function(lambda: hvd_tf.allreduce(tf.ones([]), op=hvd_tf.Sum))
        barrier = lambda: float(all_ranks())  # noqa: E731
    else:
        strategy, rank, size = make_strategy(engine)
        replicas = strategy.num_replicas_in_sync
        if engine in ("popdist", "ipu-horovod"):  # Graphcore's: a dataset per replica
            dataset = make_dataset(args.global_batch // replicas, args.seed, rank)
        else:  # a global batch per instance, split over the replicas, not sharded again
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = \
                tf.data.experimental.AutoShardPolicy.OFF
            dataset = make_dataset(args.global_batch, args.seed, rank).with_options(options)
        with strategy.scope():
            model = build_model()
            model.compile(tf.keras.optimizers.SGD(args.learning_rate), loss=loss)
        ones = strategy.experimental_distribute_values_from_function(lambda _: tf.ones([]))
        all_replicas = tf.function(lambda: strategy.reduce("SUM", ones, axis=None))
        barrier = lambda: float(all_replicas())  # noqa: E731

    def fit(steps: int, extra_callbacks: list) -> Dict[str, float]:
        history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0,
                            callbacks=callbacks + extra_callbacks)
        return {"loss": float(history.history["loss"][-1])}

    def no_step() -> tf.Tensor:
        raise RuntimeError(f"{variant} trains with Keras fit, not step by step")

    return Trainer(rank, size, replicas, step=no_step, barrier=barrier,
                   digest=weights_digest(model), fit=fit)


class BatchClock(tf.keras.callbacks.Callback):
    """Stamps the wall clock at the start of the first batch and at the end of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: List[float] = []

    def on_train_batch_begin(self, batch, logs=None) -> None:
        if not self.stamps:
            self.stamps.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.stamps.append(time.perf_counter())


def time_fit(trainer: Trainer, warmup: int, steps: int) -> Dict[str, object]:
    """:func:`time_steps` for a Keras ``fit`` trainer: an untimed ``fit`` of ``warmup`` steps (if
    any), a barrier, then one ``fit`` of ``steps`` steps timed batch by batch."""
    started = time.perf_counter()
    if warmup:
        trainer.fit(warmup, [])
    if trainer.barrier() != trainer.num_replicas:
        raise RuntimeError("the barrier did not count every replica")
    warmup_s = time.perf_counter() - started
    clock = BatchClock()
    with Usage() as usage:
        result = trainer.fit(steps, [clock])
    trainer.barrier()
    stamps = clock.stamps
    return {"elapsed_s": stamps[-1] - stamps[0],
            "step_times_s": [b - a for a, b in zip(stamps, stamps[1:])],
            "final_loss": result["loss"], "warmup_s": warmup_s, **usage.per_step(steps)}


def time_steps(trainer: Trainer, warmup: int, steps: int) -> Dict[str, object]:
    """Run ``warmup`` untimed steps (tracing included), then time ``steps`` steps.

    A barrier lines all instances up first; the last loss is read back to the host, so the clock
    stops only when the work is done. Returns the timed seconds, each step's seconds, the final
    loss and the warm-up's seconds.
    """
    started = time.perf_counter()
    loss = None
    for _ in range(warmup):
        loss = trainer.step()
    if loss is not None:
        loss.numpy()
    replicas = trainer.barrier()
    if replicas != trainer.num_replicas:
        raise RuntimeError(f"barrier counted {replicas} replicas, expected {trainer.num_replicas}")
    warmup_s = time.perf_counter() - started
    step_times: List[float] = []
    with Usage() as usage:
        start = previous = time.perf_counter()
        for _ in range(steps):
            loss = trainer.step()
            now = time.perf_counter()
            step_times.append(now - previous)
            previous = now
        final_loss = float(loss.numpy())
        elapsed = time.perf_counter() - start
    trainer.barrier()  # nobody leaves (and tears down its collectives) while others still train
    return {"elapsed_s": elapsed, "step_times_s": step_times, "final_loss": final_loss,
            "warmup_s": warmup_s, **usage.per_step(steps)}


def profile_steps(trainer: Trainer, steps: int, logdir: str, rank: int) -> None:
    """Trace ``steps`` more steps with TensorFlow's profiler on instance 0 (the others run the
    same steps untraced), each step marked ``train_step`` in the trace; then a barrier."""
    if rank == 0:
        tf.profiler.experimental.start(logdir)
    if trainer.fit:
        trainer.fit(steps, [StepMarks()])
    else:
        for number in range(steps):
            with tf.profiler.experimental.Trace("train_step", step_num=number, _r=1):
                loss = trainer.step()
                if number == steps - 1:
                    loss.numpy()  # the last step's work inside its mark
    if rank == 0:
        tf.profiler.experimental.stop()
    trainer.barrier()


class StepMarks(tf.keras.callbacks.Callback):
    """Marks each batch of a Keras fit as ``train_step`` in the profiler's trace."""

    def on_train_batch_begin(self, batch, logs=None) -> None:
        self._trace = tf.profiler.experimental.Trace("train_step", step_num=batch, _r=1)
        self._trace.__enter__()

    def on_train_batch_end(self, batch, logs=None) -> None:
        self._trace.__exit__(None, None, None)


def sampler_cpu_s() -> Optional[float]:
    """CPU seconds used so far by poprun-lite's hang-check sampler in this process (its
    thread "poprun-whereabouts"); None when it does not run here."""
    thread = next((t for t in threading.enumerate() if t.name == "poprun-whereabouts"), None)
    if thread is None or not thread.native_id:
        return None
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def onednn_enabled() -> Optional[bool]:
    """Whether TensorFlow runs its oneDNN CPU kernels here (by default only on CPUs with
    AVX512-VNNI, AVX-VNNI or AMX; TF_ENABLE_ONEDNN_OPTS overrides) or Eigen's."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    check = getattr(_pywrap_util_port, "IsMklEnabled", None)
    return bool(check()) if check else None


def make_trainer(variant: str, args: argparse.Namespace) -> Trainer:
    """The trainer a variant names, its model built from ``--seed`` (the same initial weights in
    every variant and instance)."""
    tf.keras.utils.set_random_seed(args.seed)
    if variant.endswith("-fit"):
        trainer = fit_trainer(variant, args)
    elif variant == "horovod":
        trainer = horovod_trainer(args)
    else:
        trainer = strategy_trainer(variant, args)
    if args.global_batch % trainer.num_replicas:
        raise SystemExit(f"--global-batch {args.global_batch} is not divisible by "
                         f"{trainer.num_replicas} replicas")
    return trainer


def time_in_turn(trainers: Dict[str, Trainer], args: argparse.Namespace) -> Dict[str, object]:
    """Each trainer's warm-up, then ``--steps`` timed steps of each in ``--blocks`` blocks of
    :func:`time_steps`, the trainers taking turns block by block in an order reversed every other
    block (A B, B A, ...), so a machine that drifts weighs on each alike. Per variant and block:
    samples/s and CPU ms per step; per variant: the last block's final loss and the trained
    weights' digest. A Keras fit trainer runs each block as one fit (:func:`time_fit`)."""
    def timed(trainer: Trainer, warmup: int, steps: int) -> Dict[str, object]:
        return (time_fit if trainer.fit else time_steps)(trainer, warmup, steps)

    for trainer in trainers.values():
        timed(trainer, args.warmup, 1)
    block = args.steps // args.blocks
    names = list(trainers)
    blocks: Dict[str, Dict[str, List[float]]] = {
        name: {"samples_per_s": [], "cpu_ms_per_step": []} for name in names}
    final_loss: Dict[str, float] = {}
    for index in range(args.blocks):
        for name in (names if index % 2 == 0 else names[::-1]):
            timing = timed(trainers[name], 0, block)
            blocks[name]["samples_per_s"].append(block * args.global_batch / timing["elapsed_s"])
            blocks[name]["cpu_ms_per_step"].append(timing["cpu_user_ms_per_step"]
                                                   + timing["cpu_system_ms_per_step"])
            final_loss[name] = timing["final_loss"]
    return {"block_steps": block, "blocks": blocks, "final_loss_instance0": final_loss,
            "weights_digest_instance0": {name: t.digest() for name, t in trainers.items()}}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not 1 <= args.blocks <= args.steps:
        raise SystemExit(f"--blocks {args.blocks} must be between 1 and --steps {args.steps}")
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)

    started = time.perf_counter()
    trainers = {variant: make_trainer(variant, args) for variant in args.variant}
    setup_s = time.perf_counter() - started
    trainer = next(iter(trainers.values()))
    about = {"instances": trainer.size, "replicas": trainer.num_replicas,
             "global_batch": args.global_batch, "steps": args.steps, "warmup": args.warmup,
             "import_s": _IMPORT_S, "setup_s": setup_s, "tensorflow": tf.__version__,
             "onednn": onednn_enabled()}
    if len(trainers) > 1:
        result = {"variants": args.variant, **about, **time_in_turn(trainers, args)}
    else:
        timing = (time_fit if trainer.fit else time_steps)(trainer, args.warmup, args.steps)
        elapsed, step_times = timing["elapsed_s"], timing["step_times_s"]
        if args.profile_dir:
            profile_steps(trainer, args.profile_steps, args.profile_dir, trainer.rank)
        result = {
            "variant": args.variant[0], **about,
            "elapsed_s": elapsed,
            "samples_per_s": args.steps * args.global_batch / elapsed,
            "median_step_s": float(np.median(step_times)),
            "step_times_s": step_times,
            "final_loss_instance0": timing["final_loss"],
            "warmup_s": timing["warmup_s"],
            "sampler_cpu_s": sampler_cpu_s(),
            **{k: v for k, v in timing.items() if k.endswith("_per_step")},
        }
    if trainer.rank == 0:
        with open(args.result, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
