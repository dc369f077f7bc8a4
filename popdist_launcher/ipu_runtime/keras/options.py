"""A Keras model's IPU options: where they are kept, the ``set_*_options`` methods that set them,
and what they imply (pipelining, micro-batches per optimizer update).

Options that only tune IPU data streams or hardware are accepted and logged once.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from popdist_launcher.ipu_runtime.reduction_methods import (GradientAccumulationReductionMethod,
                                                            ReplicatedMetricReductionMethod)

log = logging.getLogger(__name__)
_logged: set = set()  # the keys of the Keras extensions' messages logged so far (each once)


def log_once(logger: logging.Logger, key: str, message: str, *args: Any) -> None:
    """Log ``message`` at INFO through ``logger`` the first time ``key`` comes up."""
    if key not in _logged:
        _logged.add(key)
        logger.info(message, *args)


def has_options(model) -> bool:
    """Whether any IPU option was set on ``model`` (models without them train as before)."""
    return "_ipu_options" in model.__dict__


def options(model) -> Dict[str, Any]:
    """The IPU options of ``model``, kept outside Keras's attribute tracking."""
    opts = model.__dict__.get("_ipu_options")
    if opts is None:
        opts = {"ga_steps": None, "ga_method": GradientAccumulationReductionMethod.SUM,
                "pipeline_ga_steps": None, "device_mapping": None, "stages": None}
        object.__setattr__(model, "_ipu_options", opts)
    return opts


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Expected `{name}` to be a positive integer, but got {value!r} instead.")
    return value


def reset_train_function(model) -> None:
    """Forget ``model``'s train function, so the next fit builds one for its new options."""
    model.train_function = None
    model.train_tf_function = None


# ---- the methods added to tf.keras.Model ------------------------------------------------------
def set_gradient_accumulation_options(self,
                                      gradient_accumulation_steps_per_replica: Optional[int] = None,
                                      gradient_accumulation_reduction_method="sum",
                                      use_v2_gradient_accumulation_optimizer: bool = False,
                                      **gradient_accumulation_optimizer_kwargs) -> None:
    """Accumulate the gradients of ``gradient_accumulation_steps_per_replica`` micro-batches
    before each optimizer update, reduced by ``gradient_accumulation_reduction_method``."""
    opts = options(self)
    opts["ga_method"] = GradientAccumulationReductionMethod.parse(
        gradient_accumulation_reduction_method)
    if gradient_accumulation_steps_per_replica is not None:
        opts["ga_steps"] = _positive_int(gradient_accumulation_steps_per_replica,
                                         "gradient_accumulation_steps_per_replica")
    for key in ("opt", "num_mini_batches", "experimental_normalize_gradients"):
        if key in gradient_accumulation_optimizer_kwargs:
            raise ValueError(f"Found `{key}` key in `gradient_accumulation_optimizer_kwargs`; "
                             f"it is set by Keras (use gradient_accumulation_steps_per_replica and "
                             f"gradient_accumulation_reduction_method).")
    if gradient_accumulation_optimizer_kwargs:
        log_once(log, "ga_kwargs", "gradient accumulation optimizer options %s tune IPU memory and "
                 "have no effect on this machine.", sorted(gradient_accumulation_optimizer_kwargs))
    reset_train_function(self)


def set_pipelining_options(self, gradient_accumulation_steps_per_replica: Optional[int] = None,
                           device_mapping: Optional[List[int]] = None,
                           accumulate_outfeed: Optional[bool] = None,
                           gradient_accumulation_reduction_method="sum",
                           **pipelining_kwargs) -> None:
    """Pipelining: gradients of ``gradient_accumulation_steps_per_replica`` micro-batches per
    update; the stages run in order on this replica's device."""
    opts = options(self)
    opts["ga_method"] = GradientAccumulationReductionMethod.parse(
        gradient_accumulation_reduction_method)
    if gradient_accumulation_steps_per_replica is not None:
        opts["pipeline_ga_steps"] = _positive_int(gradient_accumulation_steps_per_replica,
                                                  "gradient_accumulation_steps_per_replica")
    if device_mapping is not None:
        if (not isinstance(device_mapping, list)
                or not all(isinstance(x, int) for x in device_mapping)):
            raise ValueError("Expected `device_mapping` to be a list of integers.")
        opts["device_mapping"] = device_mapping
    for key, alternative in (("gradient_accumulation_count",
                              "gradient_accumulation_steps_per_replica"),
                             ("device_mapping", "device_mapping"),
                             ("accumulate_outfeed", "accumulate_outfeed")):
        if key in pipelining_kwargs:
            raise ValueError(f"Found `{key}` key in `pipelining_kwargs`. Set the `{alternative}` "
                             f"argument to `set_pipelining_options` instead.")
    for key in ("computational_stages", "repeat_count", "inputs", "infeed_queue", "outfeed_queue",
                "optimizer_function"):
        if key in pipelining_kwargs:
            raise ValueError(f"Found `{key}` key in `pipelining_kwargs`. This argument is "
                             f"automatically set by Keras.")
    if pipelining_kwargs or accumulate_outfeed:
        log_once(log, "pipelining_kwargs", "pipelining options %s tune the IPU pipeline and have "
                 "no effect on this machine.", sorted(pipelining_kwargs) + (
                     ["accumulate_outfeed"] if accumulate_outfeed else []))
    reset_train_function(self)


def set_infeed_queue_options(self, **kwargs) -> None:
    """Options of the IPU infeed Keras creates (prefetch depth ...): no effect here."""
    for key in ("dataset", "infeed_spec", "element_spec"):
        if key in kwargs:
            raise ValueError(f"Found `{key}` key in `kwargs`. "
                             "This argument is automatically set by Keras.")
    if kwargs:
        log_once(log, "infeed", "infeed queue options %s tune the IPU data stream and have no "
                 "effect on this machine.", sorted(kwargs))


def set_outfeed_queue_options(self, **kwargs) -> None:
    """Options of the IPU outfeed Keras creates: no effect here."""
    for key in ("outfeed_mode", "device_ordinal"):
        if key in kwargs:
            raise ValueError(f"Found `{key}` key in `kwargs`. "
                             "This argument is not compatible with Keras.")
    if kwargs:
        log_once(log, "outfeed", "outfeed queue options %s tune the IPU data stream and have no "
                 "effect on this machine.", sorted(kwargs))


def set_asynchronous_callbacks(self, asynchronous: bool = False) -> None:
    """On an IPU, callbacks may run while the device computes; here they run after each
    execution, as with ``asynchronous=False``."""
    if asynchronous:
        log_once(log, "async", "set_asynchronous_callbacks(True): callbacks run synchronously "
                 "here, after each execution of steps_per_execution steps.")


def set_replication_options(self, replicated_metric_reduction_method="NONE") -> None:
    """How metrics of several replicas are reduced. Here metrics always cover every replica's
    batches (as MEAN does for mean metrics on an IPU system); other methods are logged once."""
    method = ReplicatedMetricReductionMethod.parse(replicated_metric_reduction_method)
    if method != ReplicatedMetricReductionMethod.MEAN:
        log_once(log, "metric_reduction", "replicated_metric_reduction_method=%s: Keras metrics "
                 "here cover every replica's batches, as MEAN does.", method.name)


# ---- what the options imply ------------------------------------------------------------------
def is_pipelined(model) -> bool:
    """Whether ``model`` was given pipeline stages or pipelining options."""
    opts = options(model)
    return opts["stages"] is not None or opts["device_mapping"] is not None or \
        opts["pipeline_ga_steps"] is not None


def accumulation_steps(model) -> int:
    """Micro-batches per optimizer update (1: no accumulation); Graphcore's rules."""
    opts = options(model)
    if is_pipelined(model):
        if opts["pipeline_ga_steps"] is None:
            raise ValueError(
                "The model which you are attempting to train is pipelined, however "
                "`gradient_accumulation_steps_per_replica` has not been set through "
                "`set_pipelining_options()`. You need to set this value as pipelined models "
                "will perform gradient accumulation when training.")
        return opts["pipeline_ga_steps"]
    return opts["ga_steps"] or 1
