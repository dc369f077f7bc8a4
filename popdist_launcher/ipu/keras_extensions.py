"""The registry of the IPU Keras extensions: ``install()`` gives every Keras model the IPU
methods (``set_gradient_accumulation_options``, ``set_pipelining_options`` ...) and the
accumulating, replicating make_train_function / fit / evaluate / predict.

IPUStrategy and PopDistStrategy call ``install()`` (``enable_keras_extensions``); the methods
live in ``popdist_launcher.ipu.keras.extensions``. Models without IPU options train exactly as
before.
"""
from __future__ import annotations

import importlib
import logging

import tensorflow as tf

from popdist_launcher.ipu.keras.extensions.extensions_base import (METHODS, OVERRIDES,
                                                                   keras_methods)

_KERAS_3_SAID: list = []


def install() -> None:
    """Add the IPU methods to tf.keras.Model (once per process); under Keras 3
    (TF_USE_LEGACY_KERAS=0 on TensorFlow 2.16+) nothing, said once."""
    if keras_methods:
        return
    from popdist_launcher import _keras2
    if _keras2.keras_3_active():
        if not _KERAS_3_SAID:
            _KERAS_3_SAID.append(True)
            logging.getLogger(__name__).warning(_keras2.keras_3_message(
                "Keras fit/evaluate under this strategy (and the IPU Keras extensions)"))
        return
    model_class = tf.keras.Model
    for name in OVERRIDES:
        keras_methods[name] = getattr(model_class, name)
    for method in METHODS:
        setattr(model_class, method.__name__, method)
    for name, override in OVERRIDES.items():
        setattr(model_class, name, override)
    # Graphcore's Keras has an ``ipu`` module (keras.ipu.PipelineStage ...): give Keras ours.
    from popdist_launcher import _keras2
    from popdist_launcher.ipu import keras as ipu_keras
    keras = _keras2.package()
    # ``from tensorflow import keras`` resolves to keras.api._v2.keras, another module object.
    for namespace in (importlib.import_module(keras), tf.keras,
                      importlib.import_module("tensorflow.keras"),
                      importlib.import_module(f"{keras}.api._v2.keras")):
        if not hasattr(namespace, "ipu"):
            setattr(namespace, "ipu", ipu_keras)
