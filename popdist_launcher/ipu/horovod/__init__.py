"""``ipu.horovod``: the older SDKs' name of ``ipu.distributed`` (``from tensorflow.python.ipu import
horovod as hvd``), Horovod's API (``allgather`` concatenates on dimension 0), with the strategies
at its module paths (``ipu.horovod.popdist_strategy``...).

Its build facts are those of the SDK's Horovod, which was built with MPI only: ``mpi_built`` and
``mpi_enabled`` are True, ``gloo_built``, ``gloo_enabled``, ``nccl_built`` and ``ddl_built``
False, whatever transport the collectives use here (``ipu.distributed`` reports the installed
Horovod's)."""
from popdist_launcher.ipu.distributed import *  # noqa: F401,F403
from popdist_launcher.ipu.distributed import __all__  # noqa: F401
from popdist_launcher.ipu.distributed._ops import horovod_allgather as allgather  # noqa: F401


def _sdk_fact(name: str, value: bool):
    def fact() -> bool:
        return value
    fact.__name__ = fact.__qualname__ = name
    fact.__doc__ = f"{value}, as the SDK's Horovod (built with MPI only) answered."
    return fact


mpi_built, mpi_enabled = _sdk_fact("mpi_built", True), _sdk_fact("mpi_enabled", True)
gloo_built, gloo_enabled = _sdk_fact("gloo_built", False), _sdk_fact("gloo_enabled", False)
nccl_built, ddl_built = _sdk_fact("nccl_built", False), _sdk_fact("ddl_built", False)
