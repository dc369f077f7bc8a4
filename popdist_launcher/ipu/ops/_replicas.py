"""The replicas an IPU collective spans here (those ``ipu.cross_replica_ops`` reduce over), this
replica's index among them, and the gather of one tensor from every one of them: the replicas
of a replicated ``ipu_compiler.compile`` program (TF1 graphs, see ``ipu._replicated_compile``)
or of the strategy whose ``run`` is calling."""
from __future__ import annotations

from typing import Tuple

import tensorflow as tf

from popdist_launcher.ipu._loop_support import REPLICA


def count_and_index() -> Tuple[int, object]:
    """(number of replicas, this replica's index: an int or an int32 scalar tensor)."""
    from popdist_launcher.ipu.ipu_strategy import replicas_of

    program_replica = REPLICA.get()
    if program_replica is not None:
        return program_replica.count, program_replica.index
    context = tf.distribute.get_replica_context()
    replicas = replicas_of(context.strategy) if context is not None else 1
    if replicas == 1:
        return 1, 0
    index = context.replica_id_in_sync_group
    if replicas < context.num_replicas_in_sync:  # PopDistStrategy reaching the instance only
        index = index % replicas
    return replicas, index


def gather(x) -> tf.Tensor:
    """``[replicas, *x.shape]``: row r is replica r's ``x``."""
    replicas, index = count_and_index()
    x = tf.convert_to_tensor(x)
    if replicas == 1:
        return tf.expand_dims(x, 0)
    program_replica = REPLICA.get()
    if program_replica is not None:
        return program_replica.program.exchange.gather(index, x)
    # a sum of one-row tensors, over the strategy's replicas
    wire = tf.int32 if x.dtype == tf.bool else x.dtype
    rows = tf.scatter_nd([[index]], [tf.cast(x, wire)], tf.concat([[replicas], tf.shape(x)], 0))
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, rows)
    return tf.cast(summed, x.dtype)


def group_rows(x, replication_factor: int, what: str):
    """(rows of the replicas in this replica's group, index within the group). Groups are
    consecutive runs of ``replication_factor`` replicas, as on IPUs.

    In a strategy's replicas a factor that does not divide them is a ValueError. In a TF1
    ``ipu_compiler.compile`` program, whose replicas the IPU system configured when it runs
    decides (see ``ipu._replicated_compile``), and in a graph built outside any program or
    strategy, it gives rows of the right shape that fail when they run, as Graphcore's op
    builds and then fails unless it runs on replicas it divides."""
    replicas, index = count_and_index()
    k = int(replication_factor)
    if k < 1 or replicas % k:
        if k >= 1 and (REPLICA.get() is not None or not tf.distribute.has_strategy()):
            return _unconfigured_rows(x, k, what), 0
        raise ValueError(f"{what}: replication_factor={k} has to divide the {replicas} "
                         f"replica(s) in sync into groups; pass a divisor of {replicas}.")
    rows = gather(x)
    if k == replicas:
        return rows, index
    start = (index // k) * k
    return rows[start:start + k], index % k


def _unconfigured_rows(x, k: int, what: str) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    failure = tf.debugging.Assert(False, [
        f"{what}: replication_factor={k} does not divide the replicas this runs on; run it "
        f"in an ipu_compiler.compile program (or a strategy) of a multiple of {k} replicas "
        f"(IPUConfig.auto_select_ipus), configured before the program runs."])
    with tf.control_dependencies([failure]):
        return tf.repeat(tf.expand_dims(x, 0), k, axis=0)
