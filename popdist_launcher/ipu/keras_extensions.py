"""``ipu.keras_extensions``: the IPU Keras extensions' registry (``install``, ``install_keras_3``,
implemented in popdist_launcher.ipu_runtime.keras_extensions, below the strategies that call
them) and Keras' ``ipu`` module, which the import table gives Keras as the methods install."""
from __future__ import annotations

import importlib

from popdist_launcher.compat import keras2
from popdist_launcher.ipu import keras as ipu_keras
from popdist_launcher.ipu_runtime.keras_extensions import (METHOD_NAMES, install,  # noqa: F401
                                                           install_keras_3)


def give_keras_its_ipu_module(_methods_module=None) -> None:
    """``keras.ipu`` (Graphcore's Keras has an ``ipu`` module: ``keras.ipu.PipelineStage`` ...)
    is ours under Keras 2, on every name Keras goes by; an import table hook runs it when the
    IPU methods (``ipu_runtime.keras.extensions_base``) import."""
    import tensorflow as tf
    if keras2.keras_3_active():
        return
    keras = keras2.package()
    # ``from tensorflow import keras`` resolves to keras.api._v2.keras, another module object.
    for namespace in (importlib.import_module(keras), tf.keras,
                      importlib.import_module("tensorflow.keras"),
                      importlib.import_module(f"{keras}.api._v2.keras")):
        if not hasattr(namespace, "ipu"):
            setattr(namespace, "ipu", ipu_keras)
