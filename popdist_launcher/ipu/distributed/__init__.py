"""``ipu.distributed``: the Horovod-style collectives under the names IPU code imports, and the
module paths of the strategies (``ipu.distributed.popdist_strategy.PopDistStrategy``, ...)."""
from popdist_launcher.collectives import (  # noqa: F401
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    broadcast,
    broadcast_variables,
    init,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
