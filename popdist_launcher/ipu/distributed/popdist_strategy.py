"""``ipu.distributed.popdist_strategy``: PopDistStrategy at its IPU module path, with
the classes of the variables it makes (``IPUMirroredVariable``, ``IPUSyncOnReadVariable`` ...)."""
from popdist_launcher.ipu_runtime import variables
from popdist_launcher.ipu_runtime.variables import (  # noqa: F401 (Graphcore's names)
    IPU_VARIABLE_CLASS_MAPPING, IPU_VARIABLE_POLICY_MAPPING, IPUDistributedVariable,
    IPUMirroredVariable, IPUOnReadPolicy, IPUOnWritePolicy, IPUSyncOnReadVariable)
from popdist_launcher.strategies.popdist_strategy import PopDistStrategy

PopDistStrategyV1 = PopDistStrategy

__all__ = ["PopDistStrategy", "PopDistStrategyV1", *variables.NAMES]
