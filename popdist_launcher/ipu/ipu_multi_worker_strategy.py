"""``ipu.ipu_multi_worker_strategy``: IPUMultiWorkerStrategy (and Graphcore's V1 name) at its IPU
module path, with the classes of the variables it makes (``IPUMirroredVariable``,
``IPUSyncOnReadVariable`` ...)."""
from popdist_launcher.ipu_runtime import variables
from popdist_launcher.ipu_runtime.variables import (  # noqa: F401 (Graphcore's names)
    IPU_VARIABLE_CLASS_MAPPING, IPU_VARIABLE_POLICY_MAPPING, IPUDistributedVariable,
    IPUMirroredVariable, IPUOnReadPolicy, IPUOnWritePolicy, IPUSyncOnReadVariable)
from popdist_launcher.strategies.ipu_multi_worker_strategy import IPUMultiWorkerStrategy

IPUMultiWorkerStrategyV1 = IPUMultiWorkerStrategy

__all__ = ["IPUMultiWorkerStrategy", "IPUMultiWorkerStrategyV1", *variables.NAMES]
