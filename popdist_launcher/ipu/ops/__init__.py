"""``ipu.ops``: Graphcore's IPU op modules with their CPU meanings (cross-replica collectives,
nn ops, pipelining ...). Each module loads on first use."""
import importlib
import importlib.util
import pkgutil


def __getattr__(name):
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'popdist_launcher.ipu.ops' has no attribute {name!r}")


def __dir__():
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


__all__ = __dir__()
