"""The registry of the IPU Keras extensions: ``install()`` gives every Keras model the IPU
methods (``set_gradient_accumulation_options``, ``set_pipelining_options`` ...) and the
accumulating, replicating make_train_function / fit / evaluate / predict.

IPUStrategy and PopDistStrategy call ``install()`` (``enable_keras_extensions``); the methods
live in ``popdist_launcher.ipu_runtime.keras`` (Keras gets its ``ipu`` module from
``popdist_launcher.ipu.keras_extensions``, run by the import table as the methods import).
Models without IPU options train exactly as before. Under Keras 3 (``install_keras_3``, which the
Horovod strategies call too) the methods are one-sentence refusals and fit / evaluate / predict
only see datasets grouped by local replica.
"""
from __future__ import annotations

import functools

import tensorflow as tf

# The IPU methods (extensions_base.METHODS), named here for Keras 3, where they cannot import.
METHOD_NAMES = ("set_gradient_accumulation_options", "set_pipelining_options",
                "set_pipeline_stage_assignment", "get_pipeline_stage_assignment",
                "reset_pipeline_stage_assignment", "print_pipeline_stage_assignment_summary",
                "set_infeed_queue_options", "set_outfeed_queue_options",
                "set_asynchronous_callbacks", "set_replication_options")


def install() -> None:
    """Add the IPU methods to tf.keras.Model (once per process). Under Keras 3 (TensorFlow
    2.16+, popdist_launcher.compat.keras2) Keras trains as it is and each IPU method raises the one
    sentence that says it needs Keras 2."""
    from popdist_launcher.compat import keras2
    if keras2.keras_3_active():
        install_keras_3()
        return
    from popdist_launcher.ipu_runtime.keras.extensions_base import (METHODS, OVERRIDES,
                                                                    keras_methods)
    if keras_methods:
        return
    model_class = tf.keras.Model
    for name in OVERRIDES:
        keras_methods[name] = getattr(model_class, name)
    for method in METHODS:
        setattr(model_class, method.__name__, method)
    for name, override in OVERRIDES.items():
        setattr(model_class, name, override)


def install_keras_3() -> None:
    """Under Keras 3 (nothing under Keras 2): Keras 3's fit / evaluate / predict given datasets
    grouped by local replica under PopDist and IPUHorovod strategies, and the IPU methods'
    one-sentence refusals (once per process)."""
    from popdist_launcher.compat import keras2
    if not keras2.keras_3_active():
        return
    model_class = tf.keras.Model
    if getattr(model_class, "_popdist_keras_3", False):
        return
    model_class._popdist_keras_3 = True
    for name in METHOD_NAMES:
        if not hasattr(model_class, name):
            setattr(model_class, name, _refusal(name))
    for name in ("fit", "evaluate", "predict"):
        setattr(model_class, name, _grouping(getattr(model_class, name)))


def _grouping(method):
    """Keras 3's ``method`` given, under a PopDist/IPUHorovod strategy with several replicas in
    an instance, a dataset whose elements hold one batch per local replica (as the strategy
    feeds them), so that Keras counts the steps the strategy runs."""
    @functools.wraps(method)
    def grouped(self, x=None, *args, **kwargs):
        extended = self.distribute_strategy.extended
        if not isinstance(x, tf.data.Dataset) or not hasattr(extended, "input_grouped"):
            return method(self, x, *args, **kwargs)
        with extended.input_grouped(True):
            return method(self, extended.replica_elements(x), *args, **kwargs)
    return grouped


def _refusal(name: str):
    def method(self, *args, **kwargs):
        from popdist_launcher.compat import keras2
        raise keras2.Keras3Error(keras2.keras_3_message(f"Model.{name}"))
    method.__name__ = name
    method.__doc__ = f"Graphcore's Model.{name}: Keras 2 only (Keras3Error under Keras 3)."
    return method
