"""An IPU-compatible namespace: ``from popdist_launcher import ipu`` then ``ipu.config.IPUConfig``,
as with ``from tensorflow.python import ipu``. Submodules load on first use, so importing this
package does not import TensorFlow.
"""
import importlib

from popdist_launcher.ipu import config

_SUBMODULES = {"distributed", "ipu_estimator", "ipu_run_config", "ipu_multi_worker_strategy",
               "optimizers", "scopes"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"popdist_launcher.ipu.{name}")
    raise AttributeError(f"module 'popdist_launcher.ipu' has no attribute {name!r}")


__all__ = ["config", *sorted(_SUBMODULES)]
