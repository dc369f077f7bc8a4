"""``ipu.horovod``: the older SDKs' name of ``ipu.distributed`` (``from tensorflow.python.ipu import
horovod as hvd``), Horovod's API (``allgather`` concatenates on dimension 0), with the strategies
at its module paths (``ipu.horovod.popdist_strategy``...)."""
from popdist_launcher.ipu.distributed import *  # noqa: F401,F403
from popdist_launcher.ipu.distributed import __all__  # noqa: F401
from popdist_launcher.ipu.distributed import _horovod_allgather as allgather  # noqa: F401
