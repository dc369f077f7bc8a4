"""``ipu.distributed.popdist_strategy``: PopDistStrategy at its IPU module path."""
from popdist_launcher.strategies.popdist_strategy import PopDistStrategy

PopDistStrategyV1 = PopDistStrategy

__all__ = ["PopDistStrategy", "PopDistStrategyV1"]
