"""Small pieces every strategy shares."""
from __future__ import annotations

import tensorflow as tf

from popdist_launcher.ipu_runtime.tf_internal import distribute_lib, distribute_utils, reduce_util

SUPPORTED_REDUCE_OPS = (reduce_util.ReduceOp.SUM, reduce_util.ReduceOp.MEAN)


def resolve_reduce_op(reduce_op) -> "reduce_util.ReduceOp":
    """A ReduceOp from a ReduceOp or its name; ValueError naming the supported ones otherwise."""
    try:
        op = reduce_util.ReduceOp(reduce_op.upper()) if isinstance(reduce_op, str) else reduce_op
    except ValueError:
        op = None
    if op not in SUPPORTED_REDUCE_OPS:
        raise ValueError(
            f"reduce op {reduce_op!r} is not supported across replicas; use "
            f"tf.distribute.ReduceOp.SUM or tf.distribute.ReduceOp.MEAN (or 'SUM' / 'MEAN').")
    return op


def call_for_the_only_replica(extended, fn, args, kwargs):
    """``fn`` run in place for an instance's only local replica, as a one-device strategy runs
    it (TensorFlow's mirrored strategies run it in a replica thread): a reduction (merge_call)
    may then sit inside a loop of ``fn``, as an optimizer step in Graphcore's on-device loops."""
    context = distribute_lib.ReplicaContext(
        extended._container_strategy(),  # noqa: SLF001
        replica_id_in_sync_group=extended._get_replica_id_in_sync_group(0))  # noqa: SLF001
    args, kwargs = distribute_utils.select_replica(0, (args, kwargs))
    with tf.device(extended.worker_devices[0]), context:
        return distribute_utils.regroup((fn(*args, **kwargs),))


def check_replication_mode(options) -> None:
    """NotImplementedError for InputReplicationMode.PER_REPLICA, which no strategy of ours takes."""
    if options and options.experimental_replication_mode == \
            distribute_lib.InputReplicationMode.PER_REPLICA:
        raise NotImplementedError(
            "InputReplicationMode.PER_REPLICA is not supported; use the default PER_WORKER.")
