"""``ipu.sharding``: Graphcore's helpers for ops sharded across the IPUs of one replica. A replica
is one device here, so every op is on shard 0 and propagation has nothing to do."""
from __future__ import annotations

from typing import Iterable, List, Optional, Set

import tensorflow as tf


def get_sharding(op) -> Optional[List[int]]:
    """The shards ``op`` was placed on with ``ipu.scopes.ipu_shard`` (none are recorded here)."""
    return None


def has_attr(o, attr_name: str) -> bool:
    """Whether op ``o`` carries the attribute ``attr_name``."""
    try:
        o.get_attr(attr_name)
    except ValueError:
        return False
    return True


def propagate_sharding(graph) -> None:
    """Nothing to propagate: every op of a replica runs on its one device."""


def enable_sharded_gradient_tape() -> None:
    """Gradients are computed on the replica's device like the forward pass: nothing to do."""


def dependencies(roots: Iterable) -> Set:
    """The operations ``roots`` (operations or tensors) depend on, through their inputs and
    control inputs, ``roots`` included."""
    working = [r.op if isinstance(r, tf.Tensor) else r for r in roots]
    found: Set = set()
    while working:
        op = working.pop()
        if op in found:
            continue
        found.add(op)
        working += [t.op for t in op.inputs] + list(op.control_inputs)
    return found


def get_shard_from_colocation(op) -> Optional[List[int]]:
    """The shard of an operation ``op`` is colocated with; every op is on shard 0 here and none
    records a shard, as ``get_sharding`` says."""
    return None
