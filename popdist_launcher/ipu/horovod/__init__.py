"""``ipu.horovod``: the TF1 SDKs' name of ``ipu.distributed`` (``from tensorflow.python.ipu import
horovod as hvd``), with the strategies at its module paths (``ipu.horovod.popdist_strategy``...)."""
from popdist_launcher.ipu.distributed import *  # noqa: F401,F403
from popdist_launcher.ipu.distributed import __all__  # noqa: F401
