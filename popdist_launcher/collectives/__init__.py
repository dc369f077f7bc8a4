"""Cross-instance collectives on Horovod for TensorFlow eager, tf.function and Session code."""
from __future__ import annotations

from popdist_launcher.compat.needs import require

require("tensorflow", "popdist_launcher.collectives")
require("horovod", "popdist_launcher.collectives (PopDistStrategy, IPUHorovodStrategy and "
                   "popdist.init use it)")

from popdist_launcher.collectives._allreduce import allreduce, grouped_allreduce
from popdist_launcher.collectives._describe import Average, Max, Min, Product, Sum
from popdist_launcher.collectives._gather import allgather, broadcast, broadcast_variables
from popdist_launcher.collectives._groups import barrier, register_group
from popdist_launcher.collectives._state import (
    DEFAULT_STALL_TIMEOUT,
    STALL_TIMEOUT_ENV,
    init,
    is_initialized,
    require as _require,
    shutdown,
)


def has_group(members) -> bool:
    """Whether ``register_group(members)`` has run on this instance."""
    return tuple(sorted(set(int(m) for m in members))) in _require(collective=False).groups


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
    "has_group",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "register_group",
    "shutdown",
    "size",
]
