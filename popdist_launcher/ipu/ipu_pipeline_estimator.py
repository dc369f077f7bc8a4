"""``ipu.ipu_pipeline_estimator``: IPUPipelineEstimator and IPUPipelineEstimatorSpec, an
IPUEstimator whose model_fn returns pipeline stages run by ``pipelining_ops.pipeline``.

As Graphcore's: ``iterations_per_loop`` counts micro-batches (dataset elements) per replica and
must be a multiple of ``gradient_accumulation_count``; one ``Session.run`` runs
``iterations_per_loop / gradient_accumulation_count`` weight updates and advances the global step
by ``iterations_per_loop``; ``train``/``evaluate`` steps count micro-batches. The dataset's
elements go to the first stage; training logs the mean micro-batch loss of the run; evaluation
calls ``eval_metrics_fn`` on the host with the last stage's outputs of every micro-batch of every
replica of every instance (its "loss" becomes the estimator's loss); prediction yields the last
stage's outputs, one example at a time.
"""
from __future__ import annotations

import collections
import itertools
import logging
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu._estimator_model_fn import uses_tf_collectives
from popdist_launcher.ipu._estimator_spec import call_with_accepted
from popdist_launcher.ipu.ipu_estimator import IPUEstimator
from popdist_launcher.ipu.ipu_run_config import RunConfig

log = logging.getLogger(__name__)
ModeKeys = tf.estimator.ModeKeys
LOSS_KEY = "loss"
_ELEMENT = "ipu_pipeline_estimator_element"

_SPEC_FIELDS = ["mode", "computational_stages", "gradient_accumulation_count", "eval_metrics_fn",
                "optimizer_function", "device_mapping", "loss_accumulator_dtype",
                "training_hooks", "evaluation_hooks", "prediction_hooks", "reduction_method",
                "pipeline_op_kwargs"]


class IPUPipelineEstimatorSpec(collections.namedtuple("IPUPipelineEstimatorSpec", _SPEC_FIELDS)):
    """What an IPUPipelineEstimator's model_fn returns (Graphcore's fields).

    TRAIN needs ``optimizer_function`` (it gets the last stage's outputs and returns a
    ``pipelining_ops.OptimizerFunctionOutput``); EVAL needs ``eval_metrics_fn`` (it gets the last
    stage's outputs on the host and returns a dict of metrics holding a "loss" tensor). Other
    keyword arguments (``inputs``, ``pipeline_schedule``, ``recomputation_mode``, offload
    options ...) go to ``pipelining_ops.pipeline``; ``pipeline_depth`` is the old name of
    ``gradient_accumulation_count``.
    """

    __slots__ = ()

    def __new__(cls, mode, computational_stages, gradient_accumulation_count=None,
                eval_metrics_fn=None, optimizer_function=None, device_mapping=None,
                loss_accumulator_dtype=None, training_hooks=None, evaluation_hooks=None,
                prediction_hooks=None,
                reduction_method=GradientAccumulationReductionMethod.SUM, **pipeline_op_kwargs):
        depth = pipeline_op_kwargs.pop("pipeline_depth", None)
        if depth:
            log.warning("IPUPipelineEstimatorSpec: pipeline_depth is deprecated, use "
                        "gradient_accumulation_count instead")
            gradient_accumulation_count = depth
        if mode == ModeKeys.TRAIN and not optimizer_function:
            raise ValueError("`IPUPipelineEstimatorSpec` must contain `optimizer_function` when "
                             "training")
        if mode == ModeKeys.EVAL and not eval_metrics_fn:
            raise ValueError("`IPUPipelineEstimatorSpec` must contain `eval_metrics_fn` when "
                             "evaluating")
        if not gradient_accumulation_count:
            raise ValueError("`IPUPipelineEstimatorSpec` must contain "
                             "`gradient_accumulation_count`")
        if "accumulate_outfeed" in pipeline_op_kwargs:
            raise ValueError("The `accumulate_outfeed` pipeline keyword argument cannot be passed "
                             "to the `IPUPipelineEstimatorSpec`: the estimator uses it to "
                             "accumulate the training loss.")
        return super().__new__(cls, mode, computational_stages, gradient_accumulation_count,
                               eval_metrics_fn, optimizer_function, device_mapping,
                               loss_accumulator_dtype, tuple(training_hooks or ()),
                               tuple(evaluation_hooks or ()), tuple(prediction_hooks or ()),
                               reduction_method, pipeline_op_kwargs)


class _LoopFeed:
    """The infeed of one replica's pipeline: the micro-batches of one Session.run, queued on the
    host before the loop starts and dequeued one per iteration (``pipeline`` calls
    ``_dequeue``)."""

    def __init__(self, element) -> None:
        flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(element)]
        self._structure = element
        shapes = [t.shape[1:] for t in flat]
        known = all(s.is_fully_defined() for s in shapes)
        self._shapes = shapes
        with tf.device("/device:CPU:0"):
            self._queue = tf.queue.FIFOQueue(
                capacity=max(1, int(flat[0].shape[0] or 1)), dtypes=[t.dtype for t in flat],
                shapes=shapes if known else None)
            self.enqueue = self._queue.enqueue_many(flat)

    def _dequeue(self):
        with tf.device("/device:CPU:0"):
            values = self._queue.dequeue()
        values = values if isinstance(values, list) else [values]
        for value, shape in zip(values, self._shapes):
            value.set_shape(shape)
        return tf.nest.pack_sequence_as(self._structure, values)


class _LoopOutfeed:
    """The outfeed of one replica's pipeline: what the loop enqueues, read back whole once the
    loop has run (``dequeue(count)``: each tensor stacked on a new dimension 0)."""

    def __init__(self) -> None:
        self._queue = None
        self._structure = None

    def enqueue(self, tensors):
        flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(tensors)]
        self._structure = tensors
        self._shapes = [t.shape for t in flat]
        known = all(s.is_fully_defined() for s in self._shapes)
        with tf.init_scope(), tf.device("/device:CPU:0"):
            self._queue = tf.queue.FIFOQueue(capacity=2 ** 31 - 1,
                                             dtypes=[t.dtype for t in flat],
                                             shapes=self._shapes if known else None)
        with tf.device("/device:CPU:0"):
            return self._queue.enqueue(flat)

    def dequeue(self, count: int):
        if self._queue is None:
            raise ValueError("The last computational stage returned nothing to read back.")
        with tf.device("/device:CPU:0"):
            if all(s.is_fully_defined() for s in self._shapes):
                values = self._queue.dequeue_many(count)
                values = values if isinstance(values, list) else [values]
            else:
                items = [self._queue.dequeue() for _ in range(count)]
                items = [i if isinstance(i, list) else [i] for i in items]
                values = [tf.stack(list(parts)) for parts in zip(*items)]
        return tf.nest.pack_sequence_as(self._structure, values)


class IPUPipelineEstimator(IPUEstimator):
    """An IPUEstimator for pipelined models: the model_fn (taking ``mode``, ``params``,
    ``config``, never ``features`` or ``labels``) returns an IPUPipelineEstimatorSpec; each
    replica of every poprun-lite instance runs the pipeline over its own micro-batches, and an
    optimizer's ``apply_gradients`` reduces the accumulated gradients over all replicas."""

    def __init__(self, model_fn: Callable, model_dir: Optional[str] = None,
                 config: Optional[RunConfig] = None, params: Optional[Dict[str, Any]] = None,
                 warm_start_from=None) -> None:
        super().__init__(model_fn, model_dir=model_dir, config=config, params=params,
                         warm_start_from=warm_start_from)

    def _iterations(self, mode: str) -> int:
        return self._ipu_run_config.iterations_per_loop

    # ---- public API differences ----------------------------------------------------------
    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        """Evaluates ``steps`` micro-batches (a multiple of iterations_per_loop) per replica."""
        per_loop = self._iterations(ModeKeys.EVAL)
        if steps is not None and steps % per_loop:
            raise ValueError(f"steps ({steps}) must be a multiple of iterations_per_loop "
                             f"({per_loop}).")
        return super().evaluate(input_fn, steps=None if steps is None else steps // per_loop,
                                hooks=hooks, checkpoint_path=checkpoint_path, name=name)

    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None,
                yield_single_examples=True, num_predictions=None):
        """Yields the last stage's outputs: single examples, or one micro-batch at a time with
        ``yield_single_examples=False``; at most ``num_predictions`` of them."""
        runs = super().predict(input_fn, predict_keys=predict_keys, hooks=hooks,
                               checkpoint_path=checkpoint_path,
                               yield_single_examples=yield_single_examples)
        return itertools.islice(_flatten(runs), num_predictions)

    def _call_input_fn(self, input_fn, mode, input_context=None):
        # The whole dataset element goes to the first stage, in every mode (tf.estimator would
        # keep only the features of a (features, labels) element when predicting).
        dataset = super()._call_input_fn(input_fn, mode, input_context)
        return dataset.map(lambda *element: {_ELEMENT: element})

    # ---- the pipelined model function ----------------------------------------------------
    def _call_pipeline_model_fn(self, mode, params):
        accepted = _accepted_args(self._user_model_fn)
        if "features" in accepted or "labels" in accepted:
            raise ValueError("The `model_fn` used with `IPUPipelineEstimator` must not have "
                             "`features` or `labels` arguments. They are instead passed to the "
                             "first pipeline stage function.")
        spec = call_with_accepted(self._user_model_fn, mode=mode, params=params,
                                  config=self.config)
        if not isinstance(spec, IPUPipelineEstimatorSpec):
            raise TypeError("The `model_fn` used with `IPUPipelineEstimator` must return "
                            "`IPUPipelineEstimatorSpec`.")
        mapping = spec.device_mapping
        required = len(set(mapping)) if mapping is not None else len(spec.computational_stages)
        shards = self._ipu_run_config.num_shards
        if not shards // 2 < required <= shards:
            raise ValueError(f"This pipeline requires {required} devices, but "
                             f"`IPURunConfig.num_shards` was set to {shards} (num_shards/2 < "
                             f"pipeline_devices <= num_shards).")
        return spec

    def _repeat_count(self, spec) -> int:
        per_loop, count = self._iterations(spec.mode), spec.gradient_accumulation_count
        if per_loop < count:
            raise ValueError(f"`IPURunConfig.iterations_per_loop` (got {per_loop}) cannot be less "
                             f"than `gradient_accumulation_count` (got {count})")
        if per_loop % count:
            raise ValueError(f"`IPURunConfig.iterations_per_loop` (got {per_loop}) must be "
                             f"divisible by `gradient_accumulation_count` (got {count})")
        return per_loop // count

    def _replicated_model_fn(self, features, labels, mode, params, config):
        from popdist_launcher.ipu.ops import pipelining_ops

        if getattr(self._exporting, "active", False):
            raise NotImplementedError("export_saved_model of an IPUPipelineEstimator is not "
                                      "supported; export the stages' model with a plain "
                                      "tf.estimator.Estimator or Keras.")
        strategy = self._strategy(mode)
        offset = self._instance_index * self._num_local
        per_loop = self._iterations(mode)
        specs = []
        element = features[_ELEMENT]
        element = element[0] if len(element) == 1 else tuple(element)
        global_step = tf.compat.v1.train.get_global_step()
        # Read before the pipeline runs: its optimizer may increment the global step itself.
        start_step = global_step.read_value() if mode == ModeKeys.TRAIN else None

        def replica_fn(micro_batches):
            with tf.control_dependencies([start_step] if start_step is not None else []):
                spec = self._call_pipeline_model_fn(mode, params)
                specs.append(spec)
                feed, outfeed = _LoopFeed(micro_batches), _LoopOutfeed()
                train = mode == ModeKeys.TRAIN
                repeat_count = self._repeat_count(spec)
                with tf.control_dependencies([feed.enqueue]):
                    pipeline = pipelining_ops.pipeline(
                        spec.computational_stages, spec.gradient_accumulation_count,
                        repeat_count=repeat_count, infeed_queue=feed, outfeed_queue=outfeed,
                        optimizer_function=spec.optimizer_function if train else None,
                        device_mapping=spec.device_mapping, outfeed_loss=train,
                        accumulate_outfeed=train,
                        accumulate_outfeed_dtype=spec.loss_accumulator_dtype,
                        reduction_method=spec.reduction_method,
                        # One name in every mode: TF1 graphs name the stages' variables
                        # after the loop, and evaluation restores what training saved.
                        name="ipu_pipeline_estimator", **spec.pipeline_op_kwargs)
                with tf.control_dependencies([pipeline]):
                    return outfeed.dequeue(repeat_count if train else per_loop)

        def distribute(structure):
            # [iterations, local replicas, ...] -> each replica's [iterations, ...]
            return strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.nest.map_structure(
                    lambda t: t[:, ctx.replica_id_in_sync_group - offset], structure))

        with strategy.scope(), strategy._scale_loss_for_estimator_enabled():  # noqa: SLF001
            outputs = strategy.run(replica_fn, args=(distribute(element),))
        spec = specs[0]
        if mode == ModeKeys.TRAIN:
            return self._pipeline_train_spec(strategy, spec, outputs, global_step, start_step)
        if mode == ModeKeys.EVAL:
            return self._pipeline_eval_spec(strategy, spec, outputs)
        return self._pipeline_predict_spec(strategy, spec, outputs)

    def _pipeline_train_spec(self, strategy, spec, outputs, global_step, start_step):
        # Each replica's loss summed over each update's micro-batches: the mean micro-batch loss,
        # the mean over the replicas. Under IPUMultiWorkerStrategy the workers' losses summed,
        # as tf.estimator reports a distributed loss that no optimizer scaled in its own graph
        # (Graphcore's pipeline scales it inside the pipeline's functions).
        reduce_op = (tf.distribute.ReduceOp.SUM if uses_tf_collectives(strategy)
                     else tf.distribute.ReduceOp.MEAN)
        loss = strategy.reduce(
            reduce_op,
            strategy.run(lambda t: tf.reduce_mean(tf.cast(t, tf.float32)), args=(outputs,)),
            axis=None) / spec.gradient_accumulation_count
        with tf.control_dependencies([loss]):
            train_op = tf.group(global_step.assign(start_step + self._iterations(ModeKeys.TRAIN)))
        return tf.estimator.EstimatorSpec(ModeKeys.TRAIN, loss=loss, train_op=train_op,
                                          training_hooks=list(spec.training_hooks))

    def _pipeline_eval_spec(self, strategy, spec, outputs):
        flat = [self._all_replicas(strategy, t) for t in tf.nest.flatten(outputs)]
        local = strategy.experimental_local_results(outputs)[0]
        gathered = tf.nest.pack_sequence_as(local, flat)
        from popdist_launcher.ipu._loop_support import body_arguments
        args, kwargs = body_arguments(gathered)
        with tf.device("/device:CPU:0"):
            metrics = spec.eval_metrics_fn(*args, **kwargs)
        if not isinstance(metrics, dict):
            raise TypeError(f"The `eval_metrics_fn` must return a dict, but got "
                            f"{type(metrics)}.")
        if LOSS_KEY not in metrics:
            raise KeyError(f"The dict returned from `eval_metrics_fn` must contain "
                           f"'{LOSS_KEY}'.")
        metrics = dict(metrics)
        loss = tf.reduce_mean(tf.cast(metrics.pop(LOSS_KEY), tf.float32))
        return tf.estimator.EstimatorSpec(ModeKeys.EVAL, loss=loss, eval_metric_ops=metrics,
                                          evaluation_hooks=list(spec.evaluation_hooks))

    def _pipeline_predict_spec(self, strategy, spec, outputs):
        local = strategy.experimental_local_results(outputs)
        first = local[0]
        if isinstance(first, (list, tuple)):
            if len(first) != 1:
                raise ValueError(f"The last computational stage must return exactly one "
                                 f"prediction tensor, but got {len(first)}")
            local = [x[0] for x in local]

        def merge(*replicas):
            # [iterations, local replicas, ...] -> one row per micro-batch, in dataset order
            stacked = tf.stack(replicas, axis=1)
            return tf.reshape(stacked, tf.concat([[-1], tf.shape(stacked)[2:]], 0))

        predictions = tf.nest.map_structure(merge, *local)
        return tf.estimator.EstimatorSpec(ModeKeys.PREDICT, predictions=predictions,
                                          prediction_hooks=list(spec.prediction_hooks))


def _accepted_args(fn: Callable):
    from tensorflow_estimator.python.estimator import util as estimator_util
    return estimator_util.fn_args(fn)


def _flatten(runs):
    """The estimator yields one row per micro-batch (or a whole run): yield its examples."""
    for item in runs:
        if isinstance(item, dict):
            size = len(next(iter(item.values())))
            for i in range(size):
                yield {k: v[i] for k, v in item.items()}
        else:
            yield from item
