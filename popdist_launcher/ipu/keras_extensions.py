"""The IPU Keras extensions: ``set_gradient_accumulation_options``, ``set_pipelining_options``,
``set_infeed_queue_options`` ... on every Keras model (Model, Sequential, functional).

Gradient accumulation trains as Graphcore's does: each optimizer update uses N micro-batches
(forward and backward pass each), their gradients summed (SUM, the default) or averaged (MEAN,
RUNNING_MEAN); ``steps_per_execution`` must be a multiple of N and must divide the steps of an
epoch. A pipelined model (``set_pipelining_options`` with stages from
``set_pipeline_stage_assignment`` or ``keras.ipu.PipelineStage``) always accumulates; its stages
run in order on the replica's device, so it computes the same numbers as the unpipelined model.
Replicas follow Graphcore's rule (``replica_layout``): selected IPUs over the IPUs of one
pipeline; where the IPUs were made one device each, a replica spans several devices. Options
that only tune IPU data streams or hardware are accepted and logged once.

Under an IPUStrategy with several local replicas, ``fit`` / ``evaluate`` / ``predict`` follow
Graphcore's replicated Keras: each replica reads its own batches (consecutive batches go to
replicas 0, 1, ...), the steps of an epoch (and a given ``steps_per_epoch`` / ``steps``) are
divided by the replication factor (the remainder dropped with a warning),
``steps_per_execution`` and the accumulation count count per-replica steps, gradients are summed
over the replicas, and ``predict`` returns outputs in the input's order.

When TensorFlow made its devices before ``configure_ipu_system`` (so the IPUStrategy has one
device where Graphcore's rule gives R replicas), Keras runs the R replicas one after another on
that device (``emulated_replicas``): each step reads the next batch of every replica and sums
their gradients, the same numbers as R devices.

``install()`` adds the methods to ``tf.keras.Model``; IPUStrategy calls it. Models without these
options train exactly as before.
"""
from __future__ import annotations

import importlib
import logging
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from keras.src.engine import data_adapter, training  # the one place this package reaches into Keras

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu.replicated_metrics import ReplicatedMetricReductionMethod

log = logging.getLogger(__name__)
_logged: set = set()
_original: Dict[str, Any] = {}


def _log_once(key: str, message: str, *args: Any) -> None:
    if key not in _logged:
        _logged.add(key)
        log.info(message, *args)


def _options(model) -> Dict[str, Any]:
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


def _reset(model) -> None:
    model.train_function = None
    model.train_tf_function = None


# ---- the methods added to tf.keras.Model ------------------------------------------------------
def set_gradient_accumulation_options(self, gradient_accumulation_steps_per_replica: Optional[int] = None,
                                      gradient_accumulation_reduction_method="sum",
                                      use_v2_gradient_accumulation_optimizer: bool = False,
                                      **gradient_accumulation_optimizer_kwargs) -> None:
    """Accumulate the gradients of ``gradient_accumulation_steps_per_replica`` micro-batches
    before each optimizer update, reduced by ``gradient_accumulation_reduction_method``."""
    opts = _options(self)
    opts["ga_method"] = GradientAccumulationReductionMethod.parse(gradient_accumulation_reduction_method)
    if gradient_accumulation_steps_per_replica is not None:
        opts["ga_steps"] = _positive_int(gradient_accumulation_steps_per_replica,
                                         "gradient_accumulation_steps_per_replica")
    for key in ("opt", "num_mini_batches", "experimental_normalize_gradients"):
        if key in gradient_accumulation_optimizer_kwargs:
            raise ValueError(f"Found `{key}` key in `gradient_accumulation_optimizer_kwargs`; it is "
                             f"set by Keras (use gradient_accumulation_steps_per_replica and "
                             f"gradient_accumulation_reduction_method).")
    if gradient_accumulation_optimizer_kwargs:
        _log_once("ga_kwargs", "gradient accumulation optimizer options %s tune IPU memory and "
                  "have no effect on this machine.", sorted(gradient_accumulation_optimizer_kwargs))
    _reset(self)


def set_pipelining_options(self, gradient_accumulation_steps_per_replica: Optional[int] = None,
                           device_mapping: Optional[List[int]] = None,
                           accumulate_outfeed: Optional[bool] = None,
                           gradient_accumulation_reduction_method="sum", **pipelining_kwargs) -> None:
    """Pipelining: gradients of ``gradient_accumulation_steps_per_replica`` micro-batches per
    update; the stages run in order on this replica's device."""
    opts = _options(self)
    opts["ga_method"] = GradientAccumulationReductionMethod.parse(gradient_accumulation_reduction_method)
    if gradient_accumulation_steps_per_replica is not None:
        opts["pipeline_ga_steps"] = _positive_int(gradient_accumulation_steps_per_replica,
                                                  "gradient_accumulation_steps_per_replica")
    if device_mapping is not None:
        if not isinstance(device_mapping, list) or not all(isinstance(x, int) for x in device_mapping):
            raise ValueError("Expected `device_mapping` to be a list of integers.")
        opts["device_mapping"] = device_mapping
    for key, alternative in (("gradient_accumulation_count", "gradient_accumulation_steps_per_replica"),
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
        _log_once("pipelining_kwargs", "pipelining options %s tune the IPU pipeline and have no "
                  "effect on this machine.", sorted(pipelining_kwargs) + (
                      ["accumulate_outfeed"] if accumulate_outfeed else []))
    _reset(self)


def set_pipeline_stage_assignment(self, pipeline_stage_assignment) -> None:
    """Assign layers to pipeline stages: stage numbers (one per layer) or the assignment objects
    ``get_pipeline_stage_assignment`` returns, with ``pipeline_stage`` set."""
    stages = [getattr(a, "pipeline_stage", a) for a in pipeline_stage_assignment]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stages):
        raise ValueError("pipeline stage assignments must be non-negative ints (or assignment "
                         "objects whose pipeline_stage is set).")
    _options(self)["stages"] = stages
    _reset(self)


def get_pipeline_stage_assignment(self):
    """One assignment per layer (per layer call of a functional model), with its stage (None
    until assigned)."""
    from popdist_launcher.ipu import keras as ipu_keras

    stages = _options(self)["stages"] or []
    layers = [layer for layer in self.layers if not isinstance(layer, tf.keras.layers.InputLayer)]
    if isinstance(self, tf.keras.Sequential):
        make = ipu_keras.SequentialLayerPipelineStageAssignment
        return [make(layer, stages[i] if i < len(stages) else None) for i, layer in enumerate(layers)]
    make = ipu_keras.FunctionalLayerPipelineStageAssignment
    if not stages:  # the stages keras.ipu.PipelineStage gave the layers' calls
        stages = [getattr(layer._inbound_nodes[0], "_pipeline_stage", None)  # noqa: SLF001
                  if layer._inbound_nodes else None for layer in layers]  # noqa: SLF001
    return [make(layer, 0, stages[i] if i < len(stages) else None) for i, layer in enumerate(layers)]


def reset_pipeline_stage_assignment(self) -> None:
    _options(self)["stages"] = None
    _reset(self)


def print_pipeline_stage_assignment_summary(self, line_length=None, print_fn=None) -> None:
    (print_fn or print)(f"pipeline stage assignment of {self.name}: {_options(self)['stages']}")


def set_infeed_queue_options(self, **kwargs) -> None:
    """Options of the IPU infeed Keras creates (prefetch depth ...): no effect here."""
    for key in ("dataset", "infeed_spec", "element_spec"):
        if key in kwargs:
            raise ValueError(f"Found `{key}` key in `kwargs`. This argument is automatically set by Keras.")
    if kwargs:
        _log_once("infeed", "infeed queue options %s tune the IPU data stream and have no effect "
                  "on this machine.", sorted(kwargs))


def set_outfeed_queue_options(self, **kwargs) -> None:
    """Options of the IPU outfeed Keras creates: no effect here."""
    for key in ("outfeed_mode", "device_ordinal"):
        if key in kwargs:
            raise ValueError(f"Found `{key}` key in `kwargs`. This argument is not compatible with Keras.")
    if kwargs:
        _log_once("outfeed", "outfeed queue options %s tune the IPU data stream and have no effect "
                  "on this machine.", sorted(kwargs))


def set_asynchronous_callbacks(self, asynchronous: bool = False) -> None:
    """On an IPU, callbacks may run while the device computes; here they run after each
    execution, as with ``asynchronous=False``."""
    if asynchronous:
        _log_once("async", "set_asynchronous_callbacks(True): callbacks run synchronously here, "
                  "after each execution of steps_per_execution steps.")


def set_replication_options(self, replicated_metric_reduction_method="NONE") -> None:
    """How metrics of several replicas are reduced. Here metrics always cover every replica's
    batches (as MEAN does for mean metrics on an IPU system); other methods are logged once."""
    method = ReplicatedMetricReductionMethod.parse(replicated_metric_reduction_method)
    if method != ReplicatedMetricReductionMethod.MEAN:
        _log_once("metric_reduction", "replicated_metric_reduction_method=%s: Keras metrics here "
                  "cover every replica's batches, as MEAN does.", method.name)


# ---- training with accumulation --------------------------------------------------------------
def _is_pipelined(model) -> bool:
    opts = _options(model)
    return opts["stages"] is not None or opts["device_mapping"] is not None or \
        opts["pipeline_ga_steps"] is not None


def accumulation_steps(model) -> int:
    """Micro-batches per optimizer update (1: no accumulation); Graphcore's rules."""
    opts = _options(model)
    if _is_pipelined(model):
        if opts["pipeline_ga_steps"] is None:
            raise ValueError(
                "The model which you are attempting to train is pipelined, however "
                "`gradient_accumulation_steps_per_replica` has not been set through "
                "`set_pipelining_options()`. You need to set this value as pipelined models "
                "will perform gradient accumulation when training.")
        return opts["pipeline_ga_steps"]
    return opts["ga_steps"] or 1


def _node_stages(model) -> List[int]:
    """The stages ``keras.ipu.PipelineStage`` gave the calls of a functional model's layers."""
    if isinstance(model, tf.keras.Sequential) or not hasattr(model, "_network_nodes"):
        return []
    from keras.src.engine import functional

    stages = []
    for layer in model.layers:
        for index, node in enumerate(layer._inbound_nodes):  # noqa: SLF001
            key = functional._make_node_key(layer.name, index)  # noqa: SLF001
            stage = getattr(node, "_pipeline_stage", None)
            if stage is not None and key in model._network_nodes:  # noqa: SLF001
                stages.append(stage)
    return stages


def shard_count(model) -> int:
    """The IPUs one replica of ``model`` spans, as Graphcore counts them: max(device_mapping)
    + 1 when ``set_pipelining_options`` gave one, else the last pipeline stage + 1 (from
    ``set_pipeline_stage_assignment`` or ``keras.ipu.PipelineStage``); 1 when not pipelined."""
    if "_ipu_options" not in model.__dict__ or not _is_pipelined(model):
        return 1
    opts = _options(model)
    if opts["device_mapping"]:
        return max(opts["device_mapping"]) + 1
    stages = opts["stages"] or _node_stages(model)
    return max(stages) + 1 if stages else 1


def replication_factor(model) -> int:
    """The replicas Graphcore's IPUStrategy trains ``model`` on: the selected IPUs over the
    model's shards rounded up to a power of two; the local replicas of PopDistStrategy /
    IPUHorovodStrategy; 1 otherwise. ValueError when the IPUs cannot hold the model or this
    IPUStrategy cannot run those replicas (see ``replica_span``)."""
    return _replicas(model)[0]


def replica_span(model) -> int:
    """How many of the IPUStrategy's local replica devices one replica of ``model`` spans: 1,
    or the shards of a pipelined model when the IPUs were selected one device each (for
    example ``auto_select_ipus = 4`` and 2 stages: 2 replicas, each over 2 devices, its stages
    in order on the first)."""
    return _replicas(model)[1]


def replica_layout(num_ipus: int, shards: int, local_replicas: int, ipus_per_replica: int = 1,
                   popdist_local_replicas: Optional[int] = None,
                   single_replica_reason: str = "") -> Tuple[int, int]:
    """``(replicas, span)`` by Graphcore's rule: a model over ``shards`` IPUs (rounded up to a
    power of two) on ``num_ipus`` selected IPUs makes ``num_ipus // shards`` replicas. ``span``
    is how many of an IPUStrategy's ``local_replicas`` devices one replica covers (more than 1
    when the IPUs were made one device each). ValueError, naming the fix, when the IPUs cannot
    hold the model, when PopDist runs another number of replicas, or when the devices cannot
    be grouped into those replicas."""
    rounded = 2 ** math.ceil(math.log2(shards))
    if shards > num_ipus:
        raise ValueError(f"Current device has {num_ipus} IPUs attached, however the current "
                         f"model requires a multiple of {rounded} IPUs.")
    replication = num_ipus // rounded
    if replication == local_replicas:
        return replication, 1
    if local_replicas == 1:
        raise ValueError(
            f"IPUConfig selects {num_ipus} IPU(s) for a model of {rounded} shard(s), so "
            f"Graphcore's IPUStrategy would train {replication} replicas; this one has a single "
            f"replica ({single_replica_reason or 'one IPU device'}). Configure the IPU system "
            f"before TensorFlow starts and use /device:IPU:0, or select {rounded} IPU(s) "
            f"(auto_select_ipus).")
    if popdist_local_replicas is not None and replication != popdist_local_replicas:
        raise ValueError(
            f"The model is pipelined over {rounded} IPUs, so the {num_ipus} IPU(s) that "
            f"popdist.tensorflow.set_ipu_config selected make {replication} replica(s), but this "
            f"instance runs {popdist_local_replicas}. Give each replica {rounded} IPUs: "
            f"poprun-lite --ipus-per-replica {rounded} (or POPDIST_NUM_IPUS_PER_REPLICA="
            f"{rounded}), or popdist.tensorflow.set_ipu_config(config, ipus_per_replica={rounded}).")
    if ipus_per_replica == 1 and local_replicas % replication == 0:
        return replication, local_replicas // replication
    raise ValueError(
        f"This IPUStrategy has {local_replicas} local replica(s) of {ipus_per_replica} IPU(s), "
        f"but a model over {rounded} IPU(s) on {num_ipus} IPU(s) makes {replication} "
        f"replica(s), as Graphcore's counts them. Select a multiple of {rounded} IPUs "
        f"(auto_select_ipus) with --ipus-per-replica {rounded} or 1.")


def _replicas(model) -> Tuple[int, int]:
    from popdist_launcher import runtime
    from popdist_launcher.ipu import config

    system = config.get_configured_system()
    strategy = model.distribute_strategy
    if not getattr(strategy, "_emulates_ipus", False):
        # PopDistStrategy / IPUHorovodStrategy: each local replica reads its own batches.
        return getattr(strategy.extended, "num_local_replicas", 1), 1
    if system is None:
        return 1, 1
    if strategy.num_local_replicas == 1 and not system.multi_replica_distribution:
        emulated = emulated_replicas(model)
        if emulated > 1:
            return emulated, 1
    popdist_local = runtime.context().num_local_replicas if system.multi_replica_distribution else None
    return replica_layout(
        system.num_ipus, shard_count(model), strategy.num_local_replicas, system.ipus_per_replica,
        popdist_local, system.missing_devices or "IPUStrategy was given an ipu_device other than IPU:0")


def emulated_replicas(model) -> int:
    """The replicas Graphcore's rule gives a model under an IPUStrategy that has a single
    device (TensorFlow started before configure_ipu_system could make one device per
    replica): they run one after another on that device (1: no emulation)."""
    from popdist_launcher.ipu import config

    system = config.get_configured_system()
    strategy = model.distribute_strategy
    if system is None or not getattr(strategy, "_emulates_ipus", False) or \
            strategy.num_local_replicas != 1 or system.multi_replica_distribution:
        return 1
    shards = shard_count(model)
    rounded = 2 ** math.ceil(math.log2(shards))
    if shards > system.num_ipus:
        raise ValueError(f"Current device has {system.num_ipus} IPUs attached, however the "
                         f"current model requires a multiple of {rounded} IPUs.")
    replicas = system.num_ipus // rounded
    if replicas > 1:
        _log_once("emulated", "IPUConfig selects %d IPUs for a model of %d shard(s): %d "
                  "replicas, as Graphcore's IPUStrategy trains; %s so they run one after "
                  "another on one device, each on its own batches, their gradients summed (a "
                  "layer that couples the samples of a batch, such as BatchNormalization, sees "
                  "each replica's batch in training and all replicas' batches at once in "
                  "evaluate/predict).", system.num_ipus, rounded, replicas,
                  system.missing_devices or "the strategy has a single device,")
    return replicas


def _emulated_input(model, x, y, sample_weight, batch_size, steps):
    """``(x, y, sample_weight, batch_size, steps, replicas)`` for replicas run one after another
    on one device (``emulated_replicas``): each step reads the next batch of every replica,
    concatenated (datasets: ``replicas`` elements; arrays: ``batch_size x replicas`` rows, the
    rows that fill no such step dropped with a warning); ``steps`` counts per-replica steps."""
    replicas = emulated_replicas(model)
    if replicas == 1:
        return x, y, sample_weight, batch_size, steps, 1
    total = _num_batches(x, batch_size, steps)
    if total is None:
        raise ValueError(f"Could not infer the size of the data for {replicas} replicas. You "
                         f"must specify the number of steps to run.")
    _check_batches_per_replica(total, replicas)
    if isinstance(x, tf.data.Dataset):
        return (_spread(x, replicas, 1), y, sample_weight, batch_size,
                None if steps is None else steps // replicas, replicas)
    batch_size = batch_size or 32
    rows = total // replicas * replicas * batch_size

    def cut(data):
        return tf.nest.map_structure(lambda a: a[:rows] if hasattr(a, "shape") else a, data)

    return (cut(x), cut(y), cut(sample_weight), batch_size * replicas,
            None if steps is None else steps // replicas, replicas)


def _check_batches_per_replica(total: int, replicas: int) -> None:
    """Graphcore's error when some replica would get no batch, and its warning when the last
    ``total % replicas`` batches are dropped."""
    if total < replicas:
        raise ValueError(f"The provided dataset contains {total} batches, but all {replicas} "
                         f"replicas need at least one each.")
    if total % replicas:
        log.warning("Dataset of %d batches is being evenly distributed between %d replicas. The "
                    "remaining %d batch(es) will be dropped.", total, replicas, total % replicas)


def _num_batches(x, batch_size, steps) -> Optional[int]:
    """The batches ``x`` gives per epoch (``steps`` when given); None when unknown."""
    if steps is not None:
        return steps
    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality())
        return cardinality if cardinality >= 0 else None
    if x is not None and not isinstance(x, dict) and hasattr(x, "__len__"):
        first = tf.nest.flatten(x)[0]
        if hasattr(first, "shape"):
            return -(-int(first.shape[0]) // (batch_size or 32))
    return None


def _replica_input(model, x, batch_size, steps, what: str) -> Tuple[Any, Optional[int], bool]:
    """``(x, steps, grouped)`` for Keras under a replicated IPUStrategy, with Graphcore's steps
    per replica: the dataset's batches (or ``steps``) over the replicas, the remainder dropped
    with a warning. A dataset is grouped here (R elements per step, so Keras counts steps per
    replica); arrays are grouped by the strategy and get ``steps``. Unchanged without
    replication."""
    replicas, span = _replicas(model)
    if replicas * span == 1 or emulated_replicas(model) > 1:
        return x, steps, False
    total = _num_batches(x, batch_size, steps)
    if total is None:
        raise ValueError(f"Could not infer the size of the data for {what}() over {replicas} "
                         f"replicas. You must specify the number of steps to run.")
    first = None if isinstance(x, tf.data.Dataset) or x is None else tf.nest.flatten(x)[0]
    if first is not None and hasattr(first, "shape") and int(first.shape[0]) % (batch_size or 32):
        raise ValueError(
            f"The provided set of data has a partial batch, which could result in data being "
            f"dropped. Either adjust the `batch_size` of your model (currently set to "
            f"{batch_size or 32}) or pad your dataset to ensure there are no partial batches.")
    _check_batches_per_replica(total, replicas)
    _log_once("replicated_metrics", "%d local replicas: each replica reads its own "
              "batches (the effective batch size is the dataset's batch x %d); Keras metrics "
              "and losses are over every replica's batches.", replicas, replicas)
    if isinstance(x, tf.data.Dataset):
        extended = model.distribute_strategy.extended
        grouped = extended.replica_elements(x) if span == 1 else _spread(x, replicas, span)
        return grouped, None if steps is None else steps // replicas, True
    return x, total // replicas, False


def _spread(dataset: "tf.data.Dataset", replicas: int, span: int) -> "tf.data.Dataset":
    """``replica_elements`` for replicas over ``span`` devices each: each element of the result
    holds the next ``replicas`` elements, each ``span`` times in a row, concatenated on the batch
    axis, so that the devices of one replica read the same batch."""

    def concat(t):
        t = tf.repeat(t, span, axis=0)
        if t.shape[1:].is_fully_defined():  # static shapes let TensorFlow split it evenly
            return tf.reshape(t, [replicas * span * t.shape[1], *t.shape[2:]])
        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))

    def group(*element):
        out = tf.nest.map_structure(concat, element)
        return out if len(element) > 1 else out[0]

    return dataset.batch(replicas, drop_remainder=True).map(group)


def _is_stage_device(span: int) -> bool:
    """In a replica context: whether this device replica is the first of its replica's
    ``span`` devices (the one that runs the stages; the others hold its other IPUs)."""
    replica_id = tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group)
    return span == 1 or replica_id % span == 0


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
        return test_step(data) if _is_stage_device(span) else model.get_metrics_result()

    def spread_predict_step(data):
        if _is_stage_device(span):
            return predict_step(data)
        nested = getattr(model, "_nested_outputs", None)  # no rows, without calling the model
        if nested is None:
            return predict_step(tf.nest.map_structure(lambda t: t[:0], data))
        return tf.nest.map_structure(lambda t: tf.zeros([0, *t.shape[1:]], t.dtype), nested)

    replicas = replication_factor(model)
    object.__setattr__(extended, "replica_elements", lambda ds: _spread(ds, replicas, span))
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
            f"The {'pipelined ' if _is_pipelined(model) else ''}model has been configured to use "
            f"gradient accumulation for training, however the current `steps_per_execution` value "
            f"(set to {spe}) is not divisible by `gradient_accumulation_steps_per_replica` ({n}). "
            f"Adjust either so that `steps_per_execution` is divisible by it.")
    if steps is not None and steps % min(spe, steps):
        raise ValueError(f"`steps_per_execution` ({spe}) must be a divisor of the number of "
                         f"batches ({steps}) in the dataset provided.")
    if steps is not None and steps % n:
        raise ValueError(f"gradient_accumulation_steps_per_replica ({n}) must divide the number "
                         f"of batches per epoch ({steps}).")


def _make_accumulating_train_function(model, n: int):
    strategy = model.distribute_strategy
    method = _options(model)["ga_method"]
    variables = model.trainable_variables
    with strategy.scope():  # kept by the closures below, not by the model (so never saved)
        accumulators = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                    synchronization=tf.VariableSynchronization.ON_READ,
                                    aggregation=tf.VariableAggregation.SUM,
                                    name=f"accumulated_{v.name.split(':')[0].replace('/', '_')}")
                        for v in variables]
    optimizer = model.optimizer
    span = replica_span(model)
    emulated = emulated_replicas(model)
    if _is_pipelined(model):
        _log_once("pipeline", "pipelined Keras model: the stages run in order on the replica's "
                  "device, %d micro-batches per update", n)

    def replica_gradients(data):
        """The (loss-scaled) gradients of one replica's batch; its metrics updated."""
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight)
            scaled = optimizer.get_scaled_loss(loss) if hasattr(optimizer, "get_scaled_loss") else loss
        grads = tape.gradient(scaled, variables)
        with tf.control_dependencies([g for g in grads if g is not None]):
            return grads, model.compute_metrics(x, y, y_pred, sample_weight)

    def unscaled(grads, first: bool = True):
        """Gradients without loss scaling. An ALSOptimizer records the statistics of the first
        replica only (each replica has its own; read from outside, the first's)."""
        if hasattr(optimizer, "get_unscaled_gradients"):
            return optimizer.get_unscaled_gradients(grads)
        if hasattr(optimizer, "_accumulation_micro_batch"):  # keras.ipu.optimizers.ALSOptimizer
            if first:
                return optimizer._accumulation_micro_batch(grads)  # noqa: SLF001
            return optimizer._unscaled(grads)  # noqa: SLF001
        return grads

    def micro_step(data, index):
        if not _is_stage_device(span):  # a replica's other devices: nothing to add
            return model.get_metrics_result()
        if emulated == 1:
            grads, metrics = replica_gradients(data)
            grads = unscaled(grads)
        else:  # the replicas' batches, one after another; their gradients summed
            def part(r):
                def rows(t):
                    size = tf.shape(t)[0] // emulated
                    return t[r * size:(r + 1) * size]
                return tf.nest.map_structure(rows, data)

            per_replica = []
            for r in range(emulated):
                replica_grads, metrics = replica_gradients(part(r))
                per_replica.append(replica_grads)
            # Unscaled with the loss scale all replicas used, before the first updates it.
            summed = [unscaled(g, first=False) for g in per_replica[1:]]
            grads = unscaled(per_replica[0])
            for more in summed:
                grads = [None if g is None else g + m for g, m in zip(grads, more)]
        updates = []
        for acc, grad in zip(accumulators, grads):
            if grad is None:
                continue
            grad = tf.convert_to_tensor(grad)
            if method == GradientAccumulationReductionMethod.RUNNING_MEAN:
                k = tf.cast(index, grad.dtype)
                updates.append(acc.assign(acc * (k / (k + 1)) + grad / (k + 1), read_value=False))
            else:
                updates.append(acc.assign_add(grad, read_value=False))
        with tf.control_dependencies(updates):
            return tf.nest.map_structure(tf.identity, metrics)

    def apply_step():
        scale = 1.0 / n if method == GradientAccumulationReductionMethod.MEAN else 1.0
        grads = [tf.identity(acc) * tf.cast(scale, acc.dtype) for acc in accumulators]
        getattr(optimizer, "_accumulation_apply", optimizer.apply_gradients)(list(zip(grads, variables)))
        for acc in accumulators:  # tf.function orders these after the reads above
            acc.assign(tf.zeros_like(acc), read_value=False)

    def micro(iterator, index):
        outputs = strategy.run(micro_step, args=(next(iterator), index))
        model._train_counter.assign_add(1)  # noqa: SLF001
        # Every device returns the metrics' results, already reduced over the replicas: the
        # first device's are the values (a sum showed N times the loss in the progress bar).
        return training.reduce_per_replica(outputs, strategy, reduction="first")

    def train_function(iterator):
        steps = model._steps_per_execution  # noqa: SLF001 (Keras lowers it for a short last run)
        updates = 1 if steps is None else tf.cast(steps, tf.int32) // n
        outputs = micro(iterator, tf.constant(0))
        for index in tf.range(1, n):
            outputs = micro(iterator, index)
        strategy.run(apply_step)
        for _ in tf.range(updates - 1):
            for index in tf.range(n):
                outputs = micro(iterator, index)
            strategy.run(apply_step)
        return outputs

    if model.run_eagerly:
        return train_function
    return tf.function(train_function, reduce_retracing=True)


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


def _make_train_function(self, force: bool = False):
    if emulated_replicas(self) == 1 and ("_ipu_options" not in self.__dict__ or (
            accumulation_steps(self) == 1 and replica_span(self) == 1)):
        return _original["make_train_function"](self, force=force)
    if self.train_function is not None and not force:
        return self.train_function
    self.train_function = _make_accumulating_train_function(self, accumulation_steps(self))
    return self.train_function


def _fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
         validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
         sample_weight=None, initial_epoch=0, steps_per_epoch=None, **kwargs):
    original_x = x
    x, y, sample_weight, batch_size, steps_per_epoch, _ = _emulated_input(
        self, x, y, sample_weight, batch_size, steps_per_epoch)
    x, steps, grouped = _replica_input(self, x, batch_size, steps_per_epoch, "fit")
    if emulated_replicas(self) > 1 or "_ipu_options" in self.__dict__ and (
            accumulation_steps(self) > 1 or replica_span(self) > 1):
        _check_steps(self, _num_batches(x, batch_size, steps))  # per replica
        if not self.built:
            _build_from_data(self, original_x)
    return _run_replicated(self, grouped, lambda: _original["fit"](
        self, x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
        shuffle, class_weight, sample_weight, initial_epoch, steps, **kwargs))


def _evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
              steps=None, **kwargs):
    x, y, sample_weight, batch_size, steps, _ = _emulated_input(self, x, y, sample_weight,
                                                                batch_size, steps)
    x, steps, grouped = _replica_input(self, x, batch_size, steps, "evaluate")
    return _run_replicated(self, grouped, lambda: _original["evaluate"](
        self, x, y, batch_size=batch_size, verbose=verbose, sample_weight=sample_weight,
        steps=steps, **kwargs))


def _predict(self, x, batch_size=None, verbose="auto", steps=None, **kwargs):
    """Replicas' outputs come back in the order of the input, as Graphcore's."""
    x, _, _, batch_size, steps, _ = _emulated_input(self, x, None, None, batch_size, steps)
    x, steps, grouped = _replica_input(self, x, batch_size, steps, "predict")
    return _run_replicated(self, grouped, lambda: _original["predict"](
        self, x, batch_size=batch_size, verbose=verbose, steps=steps, **kwargs))


_METHODS = (set_gradient_accumulation_options, set_pipelining_options, set_pipeline_stage_assignment,
            get_pipeline_stage_assignment, reset_pipeline_stage_assignment,
            print_pipeline_stage_assignment_summary, set_infeed_queue_options,
            set_outfeed_queue_options, set_asynchronous_callbacks, set_replication_options)


def install() -> None:
    """Add the IPU methods to tf.keras.Model (once per process)."""
    if _original:
        return
    model_class = tf.keras.Model
    _original["make_train_function"] = model_class.make_train_function
    _original["fit"] = model_class.fit
    _original["evaluate"] = model_class.evaluate
    _original["predict"] = model_class.predict
    for method in _METHODS:
        setattr(model_class, method.__name__, method)
    model_class.make_train_function = _make_train_function
    model_class.fit = _fit
    model_class.evaluate = _evaluate
    model_class.predict = _predict
    # Graphcore's Keras has an ``ipu`` module (keras.ipu.PipelineStage ...): give Keras ours.
    import keras

    from popdist_launcher.ipu import keras as ipu_keras
    # ``from tensorflow import keras`` resolves to keras.api._v2.keras, another module object.
    for namespace in (keras, tf.keras, importlib.import_module("tensorflow.keras"),
                      importlib.import_module("keras.api._v2.keras")):
        if not hasattr(namespace, "ipu"):
            setattr(namespace, "ipu", ipu_keras)
