"""``tensorflow.compiler.plugin.poplar.ops``: the generated op modules (``gen_ipu_ops`` ...).
Ops with a CPU meaning work; calling any other raises one sentence naming the op."""
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
    "gen_poputil_ops": {"ipu_replication_normalise": ipu_replication_normalise},
    "gen_pop_datastream_ops": {"ipu_host_embedding_register": ipu_host_embedding_register,
                               "ipu_host_embedding_deregister": ipu_host_embedding_deregister},
})
