"""``ipu.ipu_multi_worker_strategy``: IPUMultiWorkerStrategy (and Graphcore's V1 name) at its IPU
module path."""
from popdist_launcher.strategies.ipu_multi_worker_strategy import IPUMultiWorkerStrategy

IPUMultiWorkerStrategyV1 = IPUMultiWorkerStrategy

__all__ = ["IPUMultiWorkerStrategy", "IPUMultiWorkerStrategyV1"]
