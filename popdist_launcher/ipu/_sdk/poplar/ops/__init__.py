"""``tensorflow.compiler.plugin.poplar.ops``: the generated op modules (``gen_ipu_ops`` ...).
Ops with a CPU meaning work, with the arguments of Graphcore's op definitions (the collectives
over the replicas ``ipu.cross_replica_ops`` reduce over); calling any other raises one sentence
naming the op."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from popdist_launcher.ipu._sdk import add_modules, unavailable

MODULES = ("gen_application_runtime", "gen_dataset_benchmark", "gen_dataset_exporters",
           "gen_dataset_ops", "gen_functional_ops", "gen_grad_util_ops", "gen_ipu_ops",
           "gen_pop_datastream_ops", "gen_popdist_ops", "gen_popfloat_ops", "gen_popnn_ops",
           "gen_popops_ops", "gen_poprand_ops", "gen_poputil_ops", "gen_sendrecv_ops")


def ipu_event_trace(name=None):
    """The IPU's trace events since the last call: none on a CPU (an empty string vector)."""
    return tf.constant([], tf.string, name=name)


def ipu_replication_normalise(x, name=None):
    """``x`` divided by the replicas in sync (a cross-replica sum becomes a mean)."""
    from popdist_launcher.ipu.ops._replicas import count_and_index

    replicas, _ = count_and_index()
    return tf.math.divide(x, tf.cast(replicas, x.dtype), name=name)


def ipu_host_embedding_register(embedding, embedding_id, optimizer="SGD", device_ordinal=0,
                                name=None):
    """Nothing to connect on a CPU: the table's value."""
    return tf.identity(embedding, name=name)


def ipu_host_embedding_deregister(embedding, embedding_id, device_ordinal=0, name=None):
    """Nothing to disconnect on a CPU: the table's value."""
    return tf.identity(embedding, name=name)


def ipu_cross_replica_sum(input, replica_group_size=0, name=None):  # noqa: A002 (the op's name)
    """``IpuCrossReplicaSum``: the sum over the replicas of this replica's group (0: all)."""
    from popdist_launcher.ipu.ops import cross_replica_ops
    return cross_replica_ops.cross_replica_sum(input, replica_group_size, name=name)


def ipu_cross_replica_mean(input, replica_group_size=0, name=None):  # noqa: A002
    """``IpuCrossReplicaMean``: the mean over the replicas of this replica's group (0: all)."""
    from popdist_launcher.ipu.ops import cross_replica_ops
    return cross_replica_ops.cross_replica_mean(input, replica_group_size, name=name)


def ipu_all_gather(inputs, replication_factor, name=None):
    """``IpuAllGather``: per input, ``[replication_factor, *input.shape]``, row r being replica
    r's of this replica's group (a list, one per input)."""
    from popdist_launcher.ipu.ops import all_to_all_op
    gathered = all_to_all_op.all_gather(list(inputs), replication_factor, name=name)
    return list(gathered) if isinstance(gathered, (list, tuple)) else [gathered]


def ipu_all_to_all(input, split_dimension, concat_dimension, number_of_replicas,  # noqa: A002
                   name=None):
    """``IpuAllToAll``: ``ipu.all_to_all_op.all_to_all``."""
    from popdist_launcher.ipu.ops import all_to_all_op
    return all_to_all_op.all_to_all(input, split_dimension, concat_dimension, number_of_replicas,
                                    name=name)


def ipu_reduce_scatter(inputs, op, replication_factor, name=None):
    """``IpuReduceScatter``: ``ipu.reduce_scatter_op.reduce_scatter`` (a list, one per input)."""
    from popdist_launcher.ipu.ops import reduce_scatter_op
    scattered = reduce_scatter_op.reduce_scatter(list(inputs), replication_factor, op, name=name)
    return list(scattered) if isinstance(scattered, (list, tuple)) else [scattered]


def ipu_multi_slice(input, indices, indices_are_sorted=False, name=None):  # noqa: A002
    """``IpuMultiSlice``: the rows of ``input`` at ``indices`` (shape: indices' + a row's)."""
    return tf.gather(input, indices, name=name)


def ipu_multi_update_add(input, indices, updates, scale, indices_are_sorted=False,  # noqa: A002
                         name=None):
    """``IpuMultiUpdateAdd``: ``input`` with ``scale * updates[i]`` added to row
    ``indices[i]`` for every i (a row named twice gets both)."""
    with tf.name_scope(name or "IpuMultiUpdateAdd"):
        rows = tf.reshape(indices, [-1, 1])
        updates = tf.reshape(updates, tf.concat([[-1], tf.shape(input)[1:]], 0))
        return tf.tensor_scatter_nd_add(input, rows, updates * tf.cast(scale, updates.dtype))


_INSTEAD = {
    "ipu_stateful_gradient_accumulate": "accumulate gradients with "
    "ipu.optimizers.GradientAccumulationOptimizerV2 (or Keras' "
    "set_gradient_accumulation_options) instead",
    "ipu_device_embedding_lookup": "use ipu.embedding_ops.create_host_embedding and "
    "HostEmbedding.lookup instead",
}


def _op_getattr(module: str) -> Callable[[str], object]:
    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        instead = _INSTEAD.get(name, _INSTEAD["ipu_device_embedding_lookup"]
                               if name.startswith("ipu_device_embedding") else
                               "use the ipu.* or TensorFlow API that does the same instead")

        def op(*args, **kwargs):
            raise unavailable(f"{module}.{name}", instead)
        op.__name__ = name
        return op
    return __getattr__


add_modules(__name__, MODULES, _op_getattr, {
    "gen_ipu_ops": {"ipu_event_trace": ipu_event_trace},
    "gen_popops_ops": {name: globals()[name] for name in (
        "ipu_cross_replica_sum", "ipu_cross_replica_mean", "ipu_all_gather", "ipu_all_to_all",
        "ipu_reduce_scatter", "ipu_multi_slice", "ipu_multi_update_add")},
    "gen_poputil_ops": {"ipu_replication_normalise": ipu_replication_normalise},
    "gen_pop_datastream_ops": {"ipu_host_embedding_register": ipu_host_embedding_register,
                               "ipu_host_embedding_deregister": ipu_host_embedding_deregister},
})
