"""``ipu.horovod.popdist_strategy``: PopDistStrategy at its TF1 SDK module path."""
from popdist_launcher.ipu.distributed.popdist_strategy import (  # noqa: F401
    PopDistStrategy, PopDistStrategyV1)
