"""``ipu.distributed`` (also ``ipu.horovod``): host collectives between instances with Graphcore's
arguments, and the strategies at their IPU module paths (``ipu.distributed.popdist_strategy``...).

Both of Graphcore's spellings work: Horovod's ``allreduce(tensor, op=None)`` (``ipu.horovod``,
TF1 SDKs) and PopDist's ``allreduce(value, reduce_op, tensor_name=None)`` (``ipu.distributed``,
TF2 SDKs); ``op`` / ``reduce_op`` take ``Average``, ``Sum``, ``Min``, ``Max``, ``Product``,
``tf.distribute.ReduceOp.SUM`` / ``MEAN`` or those names. ``allgather`` follows the program's
SDK line: PopDist's stacking one (``host_collective_ops``) in TF2 programs, Horovod's
concatenation in TF1 graphs; ``ipu.horovod.allgather`` always concatenates. The collectives
start on first use, so no ``init()`` is needed (``init()`` is accepted). Importing this module
imports TensorFlow.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import horovod.tensorflow as _hvd
import tensorflow as tf

from popdist_launcher import collectives, runtime
from popdist_launcher.collectives import (  # noqa: F401
    Average,
    Max,
    Min,
    Product,
    Sum,
    init,
    shutdown,
)
from popdist_launcher.ipu.distributed import _ops

Adasum = _hvd.Adasum
def allreduce(tensor: Any, op: Any = None, reduce_op: Any = None,
              tensor_name: Optional[str] = None, name: Optional[str] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> Any:
    """Reduce ``tensor`` over all instances (default: Average); every instance gets the result.
    ``tf.IndexedSlices`` are gathered. ``tensor_name`` / ``name`` label the collective."""
    _ops.started()
    return collectives.allreduce(tensor, op=_ops.horovod_op(op, reduce_op),
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, name=tensor_name or name)


def allgather(tensor: Any, tensor_name: Optional[str] = None, name: Optional[str] = None) -> Any:
    """Gather every instance's ``tensor``: in TF2 programs stacked on a new dimension 0 (as
    ``host_collective_ops.allgather``, Graphcore's since SDK 3.1), in TF1 graphs concatenated on
    dimension 0 (Horovod's, the TF1 SDKs')."""
    if tf.compat.v1.executing_eagerly_outside_functions():
        from popdist_launcher.ipu.distributed import host_collective_ops
        return host_collective_ops.allgather(tensor, tensor_name=tensor_name or name)
    return _ops.horovod_allgather(tensor, tensor_name, name)


def broadcast(tensor: Any, root_rank: int = 0, tensor_name: Optional[str] = None,
              name: Optional[str] = None) -> Any:
    """Every instance gets instance ``root_rank``'s ``tensor``."""
    _ops.started()
    return collectives.broadcast(tensor, root_rank=root_rank, name=tensor_name or name)


def broadcast_variables(variables: Iterable[tf.Variable], root_rank: int = 0) -> Any:
    """Assign instance ``root_rank``'s value to each variable on every instance."""
    _ops.started()
    return collectives.broadcast_variables(variables, root_rank=root_rank)


def broadcast_global_variables(root_rank: int = 0) -> Any:
    """broadcast_variables() of every global variable (TF1 graphs)."""
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank=root_rank)


def size() -> int:
    """Number of instances."""
    return collectives.size() if collectives.is_initialized() else runtime.num_instances()


def rank() -> int:
    """This instance's index."""
    return collectives.rank() if collectives.is_initialized() else runtime.instance_index()


def local_rank() -> int:
    """This instance's index among the instances on its host."""
    return (collectives.local_rank() if collectives.is_initialized()
            else runtime.local_instance_index())


def local_size() -> int:
    """Number of instances on this host."""
    _ops.started()
    return collectives.local_size()


def is_homogeneous() -> bool:
    """True when every host runs the same number of instances."""
    _ops.started()
    return bool(_hvd.is_homogeneous())


# What the collectives run on, as Horovod reports it.
mpi_built = _hvd.mpi_built
mpi_enabled = _hvd.mpi_enabled
mpi_threads_supported = _hvd.mpi_threads_supported
gloo_built = _hvd.gloo_built
gloo_enabled = _hvd.gloo_enabled
nccl_built = _hvd.nccl_built
ddl_built = _hvd.ddl_built

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather", "allreduce", "broadcast",
    "broadcast_global_variables", "broadcast_variables", "ddl_built", "gloo_built", "gloo_enabled",
    "init", "is_homogeneous", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "rank", "shutdown", "size",
]
