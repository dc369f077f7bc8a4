"""``ipu.optimizers.sharded_optimizer``: ShardedOptimizer (a replica is one device here)."""
from __future__ import annotations

from popdist_launcher.ipu.optimizers.ipu_optimizer import IpuOptimizer


class ShardedOptimizer(IpuOptimizer):
    """Places each variable's update on the IPU shard of the variable; a replica is one device
    here, so it delegates to the wrapped optimizer."""

    def __init__(self, optimizer, name: str = "ShardedOptimizer") -> None:
        super().__init__(optimizer, name=name)
