"""``ipu.distributed.host_collective_ops``: Graphcore's module path for the host collectives
between instances (allreduce, allgather, broadcast of ``ipu.distributed``)."""
from popdist_launcher.ipu.distributed import allgather, allreduce, broadcast  # noqa: F401
