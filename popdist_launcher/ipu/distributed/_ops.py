"""The helpers ``ipu.distributed``'s collectives and ``host_collective_ops`` share: starting the
collectives on first use, the reduction an ``op`` / ``reduce_op`` names, Horovod's allgather."""
from __future__ import annotations

from typing import Any, Optional

import horovod.tensorflow as hvd
import tensorflow as tf

from popdist_launcher import collectives
from popdist_launcher.collectives import Average, Max, Min, Product, Sum

Adasum = hvd.Adasum
_BY_NAME = {"SUM": Sum, "MEAN": Average, "AVERAGE": Average, "MIN": Min, "MAX": Max,
            "PRODUCT": Product}


def started() -> None:
    """Start the collectives (Horovod) on first use."""
    if not collectives.is_initialized():
        collectives.init()


def horovod_op(op: Any, reduce_op: Any) -> Any:
    """The Horovod reduction of ``allreduce``'s ``op`` or ``reduce_op`` (a name, a
    ``tf.distribute.ReduceOp`` or Horovod's op); Average when neither is given."""
    if op is not None and reduce_op is not None and op != reduce_op:
        raise ValueError(f"allreduce got op={op!r} and reduce_op={reduce_op!r}; pass one of them.")
    chosen = reduce_op if reduce_op is not None else op
    if chosen is None:
        return Average
    if isinstance(chosen, tf.distribute.ReduceOp):
        chosen = chosen.value
    if isinstance(chosen, str):
        if chosen.upper() not in _BY_NAME:
            raise ValueError(f"reduce op {chosen!r} is not one of {', '.join(_BY_NAME)}.")
        return _BY_NAME[chosen.upper()]
    if chosen == Adasum:
        raise NotImplementedError("The Adasum reduction is not implemented; use Average or Sum.")
    return chosen


def horovod_allgather(tensor: Any, tensor_name: Optional[str] = None,
                      name: Optional[str] = None) -> Any:
    """Concatenate every instance's ``tensor`` on dimension 0 (first dimensions may differ)."""
    started()
    return collectives.allgather(tensor, name=tensor_name or name)
