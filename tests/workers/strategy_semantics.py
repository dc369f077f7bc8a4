"""Checks strategies' semantics under the launcher; writes OUT_DIR/semantics-<strategy>-<i>.json.

usage: strategy_semantics.py STRATEGIES OUT_DIR
STRATEGIES: popdist, horovod, multi-worker, or several joined by commas: checked one after the
other in this process, each with a strategy and variables of its own (multi-worker alone: it makes
the process a worker of TensorFlow's cluster).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402
from popdist_launcher import strategies  # noqa: E402

STRATEGIES = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
              "multi-worker": "IPUMultiWorkerStrategy"}
names, out_dir = sys.argv[1].split(","), sys.argv[2]
ctx = popdist_launcher.init()


def check(name):
    """One strategy's semantics, with a strategy and variables of its own."""
    strategy = getattr(strategies, STRATEGIES[name])()
    R = strategy.num_replicas_in_sync
    out = {"num_replicas_in_sync": R, "should_checkpoint": strategy.extended.should_checkpoint}

    with strategy.scope():
        # Each instance initialises differently; all must read instance 0's value.
        initial = tf.Variable(float(ctx.instance_index + 1))
        on_read_mean = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                                   aggregation=tf.VariableAggregation.MEAN)
        on_read_sum = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                                  aggregation=tf.VariableAggregation.SUM)
        bn = tf.keras.layers.BatchNormalization(momentum=0.0, synchronized=True)
        bn.build((None, 2))
    out["initial"] = float(initial.numpy())

    @tf.function
    def replica_step():
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        value = tf.cast(rid, tf.float32)
        on_read_mean.assign(value)
        on_read_sum.assign(value)
        return value

    per_replica = strategy.run(replica_step)
    out["on_read_mean"] = float(on_read_mean.numpy())
    out["on_read_sum"] = float(on_read_sum.numpy())
    out["reduce_sum"] = float(strategy.reduce("SUM", per_replica, axis=None).numpy())
    out["reduce_mean"] = float(
        strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None).numpy())

    # One batched MEAN of a float and an integer value (the Horovod strategies divide the float
    # inside the allreduce and floor-divide the integer's exact sum after it): inside a function.
    @tf.function
    def mixed_mean():
        def ids():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.cast(rid, tf.float32) + 0.5, tf.cast(rid, tf.int32) * 3 + 1

        floats, ints = strategy.run(ids)
        reduced = strategy.extended.batch_reduce_to(
            tf.distribute.ReduceOp.MEAN, [(floats, floats), (ints, ints)])
        return [strategy.experimental_local_results(r)[0] for r in reduced]

    if name != "multi-worker":  # TensorFlow's own collectives there
        out["mixed_mean"] = [v.numpy().item() for v in mixed_mean()]
    try:
        strategy.reduce("MAX", per_replica, axis=None)
        out["reduce_max_error"] = None
    except ValueError as exc:
        out["reduce_max_error"] = str(exc)

    # Every element of every global batch exactly once per step. PopDistStrategy and
    # IPUHorovodStrategy never shard across instances and each replica reads its own batches
    # (Graphcore's semantics): the program shards by instance and batches per replica;
    # IPUMultiWorkerStrategy auto-shards and splits global batches, as TensorFlow's collective
    # strategy does.
    global_batch, steps = 2 * R, 3

    def per_replica_batches(dataset, global_size):
        if name == "multi-worker":
            return dataset.batch(global_size)
        return dataset.shard(ctx.num_instances, ctx.instance_index).batch(global_size // R)

    dataset = per_replica_batches(tf.data.Dataset.range(global_batch * steps), global_batch)
    seen = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        gathered = strategy.gather(batch, axis=0)
        seen.append(sorted(int(v) for v in gathered.numpy()))
    out["batches"] = seen

    # Batch-norm moving statistics equal the global batch's statistics (momentum 0).
    rng = np.random.default_rng(7)
    features = rng.normal(size=(4 * R, 2)).astype("float32") * [1.0, 3.0] + [2.0, -1.0]
    bn_data = per_replica_batches(tf.data.Dataset.from_tensor_slices(features), 4 * R)

    @tf.function
    def bn_step(x):
        return strategy.run(lambda x: bn(x, training=True), args=(x,))

    for x in strategy.experimental_distribute_dataset(bn_data):
        bn_step(x)
    out["bn_moving_mean"] = bn.moving_mean.numpy().tolist()
    out["bn_moving_variance"] = bn.moving_variance.numpy().tolist()
    out["bn_expected_mean"] = features.mean(0).tolist()
    out["bn_expected_variance"] = features.var(0).tolist()
    return out


for name in names:
    out = check(name)
    with open(os.path.join(out_dir, f"semantics-{name}-{ctx.instance_index}.json"), "w") as f:
        json.dump(out, f)
