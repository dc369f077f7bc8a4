"""``ipu.horovod.ipu_horovod_strategy``: IPUHorovodStrategy at its TF1 SDK module path."""
from popdist_launcher.ipu.distributed.ipu_horovod_strategy import (  # noqa: F401
    IPUHorovodStrategy, IPUHorovodStrategyV1)
