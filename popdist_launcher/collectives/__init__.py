"""Cross-instance collectives on Horovod for TensorFlow eager, tf.function and Session code."""
from __future__ import annotations

from popdist_launcher.collectives._ops import (
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    barrier,
    broadcast,
    broadcast_variables,
    grouped_allreduce,
)
from popdist_launcher.collectives._state import (
    DEFAULT_STALL_TIMEOUT,
    STALL_TIMEOUT_ENV,
    init,
    is_initialized,
    require as _require,
    shutdown,
)


def size() -> int:
    """Number of instances taking part in the collectives."""
    return _require(collective=False).size


def rank() -> int:
    """This instance's index, 0..size()-1."""
    return _require(collective=False).rank


def local_size() -> int:
    """Number of instances on this host."""
    return _require(collective=False).local_size


def local_rank() -> int:
    """This instance's index among the instances on its host."""
    return _require(collective=False).local_rank


__all__ = [
    "Average",
    "DEFAULT_STALL_TIMEOUT",
    "Max",
    "Min",
    "Product",
    "STALL_TIMEOUT_ENV",
    "Sum",
    "allgather",
    "allreduce",
    "barrier",
    "broadcast",
    "broadcast_variables",
    "grouped_allreduce",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "shutdown",
    "size",
]
