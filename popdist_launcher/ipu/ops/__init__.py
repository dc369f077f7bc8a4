"""``ipu.ops``: Graphcore's IPU op modules with their CPU meanings (cross-replica collectives,
nn ops, pipelining ...). Each module loads on first use."""
import importlib

_MODULES = {"cross_replica_ops", "embedding_ops", "image_ops", "math_ops", "nn_ops",
            "pipelining_ops"}


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"popdist_launcher.ipu.ops.{name}")
    raise AttributeError(f"module 'popdist_launcher.ipu.ops' has no attribute {name!r}")


__all__ = sorted(_MODULES)
