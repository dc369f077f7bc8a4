"""The distribution strategies: IPUMultiWorkerStrategy (TensorFlow collectives over gRPC),
PopDistStrategy (recommended; Horovod) and IPUHorovodStrategy (Horovod for everything).
Importing one imports TensorFlow."""
from popdist_launcher.compat.needs import require

require("tensorflow", "popdist_launcher.strategies")
import importlib

_WHERE = {
    "PopDistStrategy": "popdist_launcher.strategies.popdist_strategy",
    "IPUHorovodStrategy": "popdist_launcher.strategies.popdist_strategy",
    "IPUMultiWorkerStrategy": "popdist_launcher.strategies.ipu_multi_worker_strategy",
    "HorovodAllReduce": "popdist_launcher.strategies.horovod_cross_device_ops",
}


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'popdist_launcher.strategies' has no attribute {name!r}")


__all__ = sorted(_WHERE)
