"""An IPU-compatible namespace: ``from popdist_launcher import ipu`` then ``ipu.config.IPUConfig``,
as with ``from tensorflow.python import ipu``. Submodules load on first use, so importing this
package does not import TensorFlow.
"""
import importlib

from popdist_launcher.ipu import config

_SUBMODULES = {"distributed", "horovod", "ipu_estimator", "ipu_run_config", "ipu_multi_worker_strategy",
               "optimizers", "scopes", "ipu_strategy", "ipu_infeed_queue", "ipu_outfeed_queue",
               "loops", "ipu_compiler", "utils", "gradient_accumulation", "keras_extensions",
               "ipu_session_run_hooks", "sharding", "ops", "keras",
               "dataset_benchmark"}
# Graphcore's ipu package also exposes its ops modules at the top (ipu.nn_ops is ipu.ops.nn_ops).
_OPS = {"cross_replica_ops", "embedding_ops", "image_ops", "math_ops", "nn_ops", "pipelining_ops"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"popdist_launcher.ipu.{name}")
    if name in _OPS:
        return importlib.import_module(f"popdist_launcher.ipu.ops.{name}")
    raise AttributeError(f"module 'popdist_launcher.ipu' has no attribute {name!r}")


__all__ = ["config", *sorted(_SUBMODULES | _OPS)]
