"""The registry of the IPU Keras extensions: ``install()`` gives every Keras model the IPU
methods (``set_gradient_accumulation_options``, ``set_pipelining_options`` ...) and the
accumulating, replicating make_train_function / fit / evaluate / predict.

IPUStrategy and PopDistStrategy call ``install()`` (``enable_keras_extensions``); the methods
live in ``popdist_launcher.ipu.keras.extensions``. Models without IPU options train exactly as
before.
"""
from __future__ import annotations

import importlib

import tensorflow as tf

from popdist_launcher.ipu.keras.extensions.extensions_base import (METHODS, OVERRIDES,
                                                                   keras_methods)


def install() -> None:
    """Add the IPU methods to tf.keras.Model (once per process)."""
    if keras_methods:
        return
    model_class = tf.keras.Model
    for name in OVERRIDES:
        keras_methods[name] = getattr(model_class, name)
    for method in METHODS:
        setattr(model_class, method.__name__, method)
    for name, override in OVERRIDES.items():
        setattr(model_class, name, override)
    # Graphcore's Keras has an ``ipu`` module (keras.ipu.PipelineStage ...): give Keras ours.
    import keras

    from popdist_launcher.ipu import keras as ipu_keras
    # ``from tensorflow import keras`` resolves to keras.api._v2.keras, another module object.
    for namespace in (keras, tf.keras, importlib.import_module("tensorflow.keras"),
                      importlib.import_module("keras.api._v2.keras")):
        if not hasattr(namespace, "ipu"):
            setattr(namespace, "ipu", ipu_keras)
