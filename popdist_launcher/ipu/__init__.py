"""An IPU-compatible namespace: ``from popdist_launcher import ipu`` then ``ipu.config.IPUConfig``,
as with ``from tensorflow.python import ipu``. Submodules load on first use, so importing this
package does not import TensorFlow. Which attribute is which module comes from the import table
(popdist_launcher.compat.import_table), as ``import tensorflow.python.ipu.<name>`` does: Graphcore's
package also exports its ops and optimizer modules at the top (``ipu.nn_ops`` is
``ipu.ops.nn_ops``).
"""
from popdist_launcher.compat.needs import require

require("tensorflow", "popdist_launcher.ipu (Graphcore's tensorflow.python.ipu)")
import importlib
import importlib.util

from popdist_launcher.compat import import_table
from popdist_launcher.ipu import config as config  # ipu.config without a first-use load


def _module(name: str):
    """The module ``name`` imported, or None when no such module exists."""
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    return None if found is None else importlib.import_module(name)


def __getattr__(name):
    if not name.startswith("_"):
        kind, found = import_table.ipu_attribute(name)
        if kind == "function":
            module_name, _, function = found.partition(":")
            return getattr(importlib.import_module(module_name), function)
        for module_name in found:
            module = _module(module_name)
            if module is not None:
                return module
    raise AttributeError(f"module 'popdist_launcher.ipu' has no attribute {name!r}")


def __dir__():
    import pkgutil
    names = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(names | set(import_table.IPU_OPS) | set(import_table.IPU_OPTIMIZERS)
                  | set(import_table.IPU_FUNCTIONS) | {"config"})


__all__ = __dir__()
