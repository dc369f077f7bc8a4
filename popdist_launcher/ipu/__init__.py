"""An IPU-compatible namespace: ``from popdist_launcher import ipu`` then ``ipu.config.IPUConfig``,
as with ``from tensorflow.python import ipu``. Submodules load on first use, so importing this
package does not import TensorFlow.
"""
import importlib
import importlib.util

from popdist_launcher.ipu import config as config  # ipu.config without a first-use load

# Graphcore's ipu package also exposes its ops modules at the top (ipu.nn_ops is ipu.ops.nn_ops).
_OPS = {"cross_replica_ops", "embedding_ops", "image_ops", "math_ops", "nn_ops", "pipelining_ops",
        "normalization_ops", "all_to_all_op", "control_flow_ops", "functional_ops", "rand_ops",
        "reduce_scatter_op", "replication_ops", "slicing_ops", "statistics_ops",
        "within_replica_ops"}
# ... and its optimizer modules (ipu.cross_replica_optimizer is ipu.optimizers.cross_replica_optimizer).
_OPTIMIZERS = {"cross_replica_optimizer", "gradient_accumulation_optimizer", "ipu_optimizer",
               "map_gradient_optimizer", "sharded_optimizer"}


def _submodule(package: str, name: str):
    """``package.name`` imported, or None when no such module exists."""
    if name.startswith("_"):
        return None
    try:
        found = importlib.util.find_spec(f"{package}.{name}")
    except ModuleNotFoundError:
        return None
    return None if found is None else importlib.import_module(f"{package}.{name}")


def __getattr__(name):
    if name == "outlined_function":  # Graphcore's ipu package exports it at the top
        from popdist_launcher.ipu.ops.functional_ops import outlined_function
        return outlined_function
    module = _submodule(__name__, name)
    if module is None and name in _OPS:
        module = _submodule(f"{__name__}.ops", name)
    if module is None and name in _OPTIMIZERS:
        module = _submodule(f"{__name__}.optimizers", name)
    if module is None:
        raise AttributeError(f"module 'popdist_launcher.ipu' has no attribute {name!r}")
    return module


def __dir__():
    import pkgutil
    names = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(names | _OPS | _OPTIMIZERS | {"config"})


__all__ = __dir__()
