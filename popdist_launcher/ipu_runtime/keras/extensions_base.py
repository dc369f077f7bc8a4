"""The methods the IPU extensions give every Keras model: ``METHODS`` (the ``set_*_options`` and
pipeline-stage methods) and ``OVERRIDES``, Keras's make_train_function / fit / evaluate /
predict as they accumulate gradients and run replicas.

Under an IPUStrategy with several local replicas, ``fit`` / ``evaluate`` / ``predict`` follow
Graphcore's replicated Keras: each replica reads its own batches (see ``data_adapter``),
``steps_per_execution`` and the accumulation count count per-replica steps, gradients are summed
over the replicas, and ``predict`` returns outputs in the input's order. Models without IPU
options train exactly as before.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

from popdist_launcher.ipu_runtime.keras.data_adapter import (emulated_input, num_batches,
                                                             replica_input, spread)
from popdist_launcher.ipu_runtime.keras.options import (
    accumulation_steps, has_options, is_pipelined, set_asynchronous_callbacks,
    set_gradient_accumulation_options, set_infeed_queue_options, set_outfeed_queue_options,
    set_pipelining_options, set_replication_options)
from popdist_launcher.ipu_runtime.keras.pipeline_stages import (
    get_pipeline_stage_assignment, print_pipeline_stage_assignment_summary,
    reset_pipeline_stage_assignment, set_pipeline_stage_assignment)
from popdist_launcher.ipu_runtime.keras.replicas import (emulated_replicas, is_stage_device,
                                                         replica_span, replication_factor)
from popdist_launcher.ipu_runtime.keras.train_function import make_accumulating_train_function

log = logging.getLogger(__name__)

# Keras's own methods that OVERRIDES replace, as ``keras_extensions.install`` found them.
keras_methods: Dict[str, Callable] = {}


def _run_replicated(model, grouped: bool, call: Callable[[], Any]) -> Any:
    """Run ``call`` (Keras's fit / evaluate / predict) with the strategy reading grouped input;
    a replica over several devices runs test/predict steps on its first device only."""
    extended = model.distribute_strategy.extended
    if not hasattr(extended, "input_grouped"):
        return call()
    span = replica_span(model)
    if span == 1 or "replica_span" in extended.__dict__:  # or inside fit's (validation)
        with extended.input_grouped(grouped):
            return call()
    test_step, predict_step = model.test_step, model.predict_step

    def spread_test_step(data):
        return test_step(data) if is_stage_device(span) else model.get_metrics_result()

    def spread_predict_step(data):
        if is_stage_device(span):
            return predict_step(data)
        nested = getattr(model, "_nested_outputs", None)  # no rows, without calling the model
        if nested is None:
            return predict_step(tf.nest.map_structure(lambda t: t[:0], data))
        return tf.nest.map_structure(lambda t: tf.zeros([0, *t.shape[1:]], t.dtype), nested)

    replicas = replication_factor(model)
    object.__setattr__(extended, "replica_elements", lambda ds: spread(ds, replicas, span))
    object.__setattr__(model, "test_step", spread_test_step)
    object.__setattr__(model, "predict_step", spread_predict_step)
    object.__setattr__(extended, "replica_span", span)  # outfeeds count replicas, not devices
    model.test_function = model.predict_function = None
    try:
        with extended.input_grouped(grouped):
            return call()
    finally:
        for owner, name in ((extended, "replica_elements"), (extended, "replica_span"),
                            (model, "test_step"), (model, "predict_step")):
            object.__delattr__(owner, name)
        model.test_function = model.predict_function = None


def _check_steps(model, steps: Optional[int]) -> None:
    """Graphcore's rules: ``steps_per_execution`` a multiple of the accumulation count and a
    divisor of the steps per epoch (per replica), which the count divides too."""
    n = accumulation_steps(model)
    spe = int(model._steps_per_execution.numpy()) if model._steps_per_execution is not None else 1  # noqa: SLF001
    if spe % n:
        raise RuntimeError(
            f"The {'pipelined ' if is_pipelined(model) else ''}model has been configured to use "
            f"gradient accumulation for training, however the current `steps_per_execution` value "
            f"(set to {spe}) is not divisible by `gradient_accumulation_steps_per_replica` ({n}). "
            f"Adjust either so that `steps_per_execution` is divisible by it.")
    if steps is not None and spe > steps:
        log.warning("`steps_per_execution` has been set to %d but the dataset provided to each "
                    "replica only contains %d batches. Using %d as `steps_per_execution`.",
                    spe, steps, steps)
    if steps is not None and steps % min(spe, steps):
        raise ValueError(f"`steps_per_execution` ({spe}) must be a divisor of the number of "
                         f"batches ({steps}) in the dataset provided.")
    if steps is not None and steps % n:
        raise ValueError(f"gradient_accumulation_steps_per_replica ({n}) must divide the number "
                         f"of batches per epoch ({steps}).")


def _build_from_data(model, x) -> None:
    """Build a deferred model (a Sequential without an input shape) from its input data, so
    its gradient accumulators can be made before training."""
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        spec = spec[0] if isinstance(spec, tuple) else spec
        shape = tf.nest.map_structure(lambda s: s.shape, spec)
    elif x is not None and hasattr(x, "shape"):
        shape = (None, *x.shape[1:])
    else:
        return
    with model.distribute_strategy.scope():
        model.build(shape)


def make_train_function(self, force: bool = False):
    if emulated_replicas(self) == 1 and (not has_options(self) or (
            accumulation_steps(self) == 1 and replica_span(self) == 1)):
        return keras_methods["make_train_function"](self, force=force)
    if self.train_function is not None and not force:
        return self.train_function
    self.train_function = make_accumulating_train_function(self, accumulation_steps(self))
    return self.train_function


def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
        validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
        sample_weight=None, initial_epoch=0, steps_per_epoch=None, **kwargs):
    original_x = x
    x, y, sample_weight, batch_size, steps_per_epoch, _ = emulated_input(
        self, x, y, sample_weight, batch_size, steps_per_epoch)
    x, y, sample_weight, batch_size, steps, grouped, replicas = replica_input(
        self, x, y, sample_weight, batch_size, steps_per_epoch, "fit")
    accumulating = emulated_replicas(self) > 1 or has_options(self) and (
        accumulation_steps(self) > 1 or replica_span(self) > 1)
    if accumulating or replicas > 1:
        _check_steps(self, num_batches(x, batch_size, steps))  # per replica
    if accumulating and not self.built:
        _build_from_data(self, original_x)
    return _run_replicated(self, grouped, lambda: keras_methods["fit"](
        self, x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
        shuffle, class_weight, sample_weight, initial_epoch, steps, **kwargs))


def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
             steps=None, **kwargs):
    x, y, sample_weight, batch_size, steps, _ = emulated_input(self, x, y, sample_weight,
                                                               batch_size, steps)
    x, y, sample_weight, batch_size, steps, grouped, _ = replica_input(
        self, x, y, sample_weight, batch_size, steps, "evaluate")
    return _run_replicated(self, grouped, lambda: keras_methods["evaluate"](
        self, x, y, batch_size=batch_size, verbose=verbose, sample_weight=sample_weight,
        steps=steps, **kwargs))


def predict(self, x, batch_size=None, verbose="auto", steps=None, **kwargs):
    """Replicas' outputs come back in the order of the input, as Graphcore's."""
    x, _, _, batch_size, steps, _ = emulated_input(self, x, None, None, batch_size, steps)
    x, _, _, batch_size, steps, grouped, _ = replica_input(self, x, None, None, batch_size,
                                                           steps, "predict")
    return _run_replicated(self, grouped, lambda: keras_methods["predict"](
        self, x, batch_size=batch_size, verbose=verbose, steps=steps, **kwargs))


# The methods every Keras model gets (Graphcore's names), and the Keras methods replaced.
METHODS = (set_gradient_accumulation_options, set_pipelining_options, set_pipeline_stage_assignment,
           get_pipeline_stage_assignment, reset_pipeline_stage_assignment,
           print_pipeline_stage_assignment_summary, set_infeed_queue_options,
           set_outfeed_queue_options, set_asynchronous_callbacks, set_replication_options)
OVERRIDES = {"make_train_function": make_train_function, "fit": fit, "evaluate": evaluate,
             "predict": predict}
