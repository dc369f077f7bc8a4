"""``ipu.distributed.ipu_horovod_strategy``: IPUHorovodStrategy at its IPU module path."""
from popdist_launcher.strategies.popdist_strategy import IPUHorovodStrategy

IPUHorovodStrategyV1 = IPUHorovodStrategy

__all__ = ["IPUHorovodStrategy", "IPUHorovodStrategyV1"]
