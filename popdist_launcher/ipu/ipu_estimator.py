"""``ipu.ipu_estimator``: IPUEstimator and IPUEstimatorSpec on top of ``tf.estimator``.

The user's ``model_fn`` runs once per replica under a distribution strategy (PopDistStrategy
unless ``RunConfig(train_distribute=...)`` names another), so training spans every replica of
every instance started by poprun-lite. What this module adds to ``tf.estimator.Estimator``:

- input: global batch sizes are divided by instances x replicas into ``params['batch_size']``
  (batches shorter than that are left out: replicas step together on static shapes); each local
  replica takes its own batches from the dataset the input_fn returns. As Graphcore's, nothing
  is sharded behind the program's back: the input_fn shards by instance itself
  (``dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())``, or with the
  ``input_context`` it gets when it takes one);
- ``iterations_per_loop`` training steps run inside one ``Session.run`` (a ``tf.while_loop`` over
  the dataset), and the global step advances by that much per run;
- ``host_call`` and ``eval_metrics`` run on the host; eval metrics cover the evaluation data of
  every instance, and every instance gets them;
- only the chief (instance 0) writes checkpoints, summaries and exports; every instance restores
  the same latest checkpoint, so training resumes on the same step everywhere. ``model_dir`` must
  therefore be a path every instance can read (one host, or a shared file system); without one,
  the instances of a one-host job share a folder named after the job;
- ``tf.estimator.train_and_evaluate`` under several instances trains, then evaluates once on
  every instance (evaluation joins all instances, so it cannot follow the chief's checkpoints).
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import tempfile
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from popdist_launcher import runtime, tf_config
from popdist_launcher.whereabouts import long_phase
from popdist_launcher.ipu import _estimator_hooks as estimator_hooks
from popdist_launcher.ipu.ipu_run_config import RunConfig

log = logging.getLogger(__name__)
ModeKeys = tf.estimator.ModeKeys

_SPEC_FIELDS = ["mode", "predictions", "loss", "train_op", "eval_metric_ops", "eval_metrics",
                "host_call", "training_hooks", "evaluation_hooks", "prediction_hooks"]


class IPUEstimatorSpec(collections.namedtuple("IPUEstimatorSpec", _SPEC_FIELDS)):
    """What a model_fn returns (Graphcore's fields); a plain tf.estimator.EstimatorSpec works too.

    eval_metrics: ``(metric_fn, tensors)``; metric_fn runs on the host with the tensors of every
    replica of every instance (concatenated on dimension 0) and returns a dict of tf.compat.v1
    metrics. host_call: ``(fn, tensors)``; fn runs on the host every training step, after the
    step's train_op, once per replica with that replica's tensors and in replica context, so an
    optimizer's ``apply_gradients`` in it reduces the gradients over all replicas of all
    instances (Graphcore's distributed-training pattern); what it returns runs with the step.
    """

    __slots__ = ()

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                eval_metrics=None, host_call=None, training_hooks=None, evaluation_hooks=None,
                prediction_hooks=None):
        if eval_metric_ops is not None and eval_metrics is not None:
            raise ValueError("IPUEstimatorSpec takes eval_metric_ops or eval_metrics, not both.")
        for name, pair in (("eval_metrics", eval_metrics), ("host_call", host_call)):
            if pair is not None and not (isinstance(pair, (tuple, list)) and len(pair) == 2
                                         and callable(pair[0])):
                raise ValueError(f"IPUEstimatorSpec.{name} must be a (function, tensors) pair, "
                                 f"got {pair!r}.")
        if host_call is not None and mode != ModeKeys.TRAIN:
            raise ValueError("IPUEstimatorSpec.host_call is only supported in TRAIN mode.")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops,
                               eval_metrics, host_call, tuple(training_hooks or ()),
                               tuple(evaluation_hooks or ()), tuple(prediction_hooks or ()))


def _per_replica_batch_size(global_size: Optional[int], name: str, instances: int,
                            replicas: int) -> Optional[int]:
    if global_size is None:
        return None
    if global_size % (instances * replicas):
        raise ValueError(
            f"{name} {global_size} is not divisible by {instances} worker(s) x {replicas} "
            f"replica(s) = {instances * replicas}; use a multiple of {instances * replicas}.")
    return global_size // (instances * replicas)


class IPUEstimator(tf.estimator.Estimator):
    """An Estimator whose model_fn runs on every replica of every poprun-lite instance."""

    def __init__(self, model_fn: Callable, model_dir: Optional[str] = None,
                 config: Optional[RunConfig] = None, params: Optional[Dict[str, Any]] = None,
                 warm_start_from=None, train_batch_size: Optional[int] = None,
                 eval_batch_size: Optional[int] = None,
                 predict_batch_size: Optional[int] = None) -> None:
        config = config if config is not None else RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(
                f"config must be a popdist_launcher.ipu.ipu_run_config.RunConfig, got "
                f"{type(config).__name__}; build it with ipu.ipu_run_config.RunConfig(...).")
        if params is not None and "batch_size" in params:
            raise ValueError("params['batch_size'] is set by the IPUEstimator; pass "
                             "train_batch_size / eval_batch_size / predict_batch_size instead.")
        ctx = runtime.context()
        if model_dir is None and config.model_dir is None and ctx.num_instances > 1:
            model_dir = _job_model_dir(ctx.num_instances)
        self._user_config = config
        self._ipu_run_config = config.ipu_run_config
        self._configure_replicas(ctx)
        self._train_strategy = config.train_distribute or self._default_strategy()
        self._eval_strategy = config.eval_distribute or self._train_strategy
        self._num_instances = ctx.num_instances
        self._instance_index = ctx.instance_index
        self._is_chief = config.is_chief
        self._num_local = len(self._train_strategy.extended.worker_devices)
        wanted = self._ipu_run_config.num_replicas
        if self._ipu_run_config.ipu_options is not None and wanted != self._num_local:
            raise ValueError(
                f"IPURunConfig.num_replicas is {wanted} but the strategy runs {self._num_local} "
                f"local replica(s) (poprun-lite --num-replicas / --num-instances); make them equal.")
        self._batch_sizes = {
            ModeKeys.TRAIN: _per_replica_batch_size(train_batch_size, "train_batch_size",
                                                    self._num_instances, self._num_local),
            ModeKeys.EVAL: _per_replica_batch_size(eval_batch_size, "eval_batch_size",
                                                   self._num_instances, self._num_local),
            ModeKeys.PREDICT: _per_replica_batch_size(predict_batch_size, "predict_batch_size",
                                                      self._num_instances, self._num_local),
        }
        self._user_model_fn = model_fn
        self._exporting = threading.local()
        self._warned_not_sharded = False
        super().__init__(model_fn=self._replicated_model_fn, model_dir=model_dir,
                         config=self._internal_config(config), params=dict(params or {}),
                         warm_start_from=warm_start_from)

    def _assert_members_are_not_overridden(self) -> None:
        # tf.estimator refuses subclasses that override its members; replicating the model_fn,
        # reshaping the input and keeping non-chief instances from writing need exactly that
        # (the overrides are train, config, export_saved_model, _evaluate_run, _call_input_fn).
        pass

    # ---- configuration -------------------------------------------------------------------
    def _configure_replicas(self, ctx) -> None:
        """In a single process (no launcher replicas), IPURunConfig's ``num_replicas`` replicas
        of ``num_shards`` IPUs, from ``ipu_options``, as Graphcore's IPUEstimator configures
        them, unless the program configured the IPU system itself."""
        from popdist_launcher.ipu_runtime import config as ipu_config, configured_system

        run_config = self._ipu_run_config
        if run_config.ipu_options is None or run_config.num_replicas == 1 or \
                ctx.num_instances > 1 or ctx.num_local_replicas > 1 or \
                configured_system.get_configured_system() is not None:
            return
        ipu_config.configure_ipu_system(run_config.ipu_options,
                                        ipus_per_replica=run_config.num_shards)

    @staticmethod
    def _default_strategy():
        from popdist_launcher.strategies import PopDistStrategy
        return PopDistStrategy()

    def _internal_config(self, config: RunConfig) -> RunConfig:
        """What tf.estimator sees: no strategy (we replicate), every instance initialises its
        own session, and only the chief keeps the saving and summary hooks."""
        changes: Dict[str, Any] = {"train_distribute": None, "eval_distribute": None}
        if not self._is_chief:
            changes.update(save_checkpoints_steps=None, save_checkpoints_secs=None,
                           save_summary_steps=0, log_step_count_steps=None)
        master = None
        if _uses_tf_collectives(self._train_strategy):
            # Graph-mode collectives run in this worker's gRPC server, with the strategy's
            # session config (collective group leader, device filters).
            session_config = self._train_strategy.update_config_proto(
                config.session_config or tf.compat.v1.ConfigProto())
            changes["session_config"] = session_config
            master = self._train_strategy.session_target(session_config) or None
        internal = config.replace(**changes)
        internal._is_chief = True  # noqa: SLF001 - a local session per instance, see above
        if master:
            internal._master = master  # noqa: SLF001
            internal._evaluation_master = master  # noqa: SLF001
        return internal

    @property
    def config(self) -> RunConfig:
        return self._user_config

    def _strategy(self, mode: str):
        return self._train_strategy if mode == ModeKeys.TRAIN else self._eval_strategy

    def _iterations(self, mode: str) -> int:
        return self._ipu_run_config.iterations_per_loop if mode == ModeKeys.TRAIN else 1

    # ---- public API differences ----------------------------------------------------------
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        per_loop = self._iterations(ModeKeys.TRAIN)
        for name, value in (("steps", steps), ("max_steps", max_steps)):
            if value is not None and value % per_loop:
                raise ValueError(
                    f"{name}={value} is not a multiple of iterations_per_loop={per_loop}; every "
                    f"Session.run trains {per_loop} steps, so use a multiple of it.")
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        if max_steps is not None:
            latest = self.latest_checkpoint()
            done = tf.train.load_variable(latest, "global_step") if latest else 0
            if max_steps <= done:
                log.info("skipping training: global step %d has reached max_steps %d", done,
                         max_steps)
                return self
        hooks = list(hooks or []) + [estimator_hooks.ProgressHook()]
        if steps is not None or max_steps is not None:
            hooks.append(estimator_hooks.StopAtStepHook(steps, max_steps))
        listeners, evaluations = self._split_listeners(saving_listeners)
        # tf.estimator's own stop hook assumes one step per Session.run; ours knows per_loop.
        super().train(input_fn, hooks=hooks, saving_listeners=listeners if self._is_chief else None)
        # The chief saves its last checkpoint while closing its session; nobody may read the
        # model (evaluate, predict, get_variable_value) before that checkpoint exists.
        self._barrier()
        if evaluations:
            final_step = int(tf.train.load_variable(self.latest_checkpoint(), "global_step"))
            for listener in evaluations:
                listener.begin()
                listener.end(None, final_step)
        return self

    def _split_listeners(self, saving_listeners) -> Tuple[list, list]:
        """(checkpoint listeners for the chief, train_and_evaluate's evaluation listeners).

        Evaluation runs collectives, so every instance must evaluate the same checkpoint at the
        same time: under several instances, tf.estimator.train_and_evaluate's evaluation (which
        it runs from a checkpoint listener, on the chief only) runs once after training, on
        every instance. One instance keeps tf.estimator's behaviour.
        """
        listeners = list(saving_listeners or [])
        if self._num_instances == 1:
            return listeners, []
        from tensorflow_estimator.python.estimator import training as estimator_training

        evaluation_type = estimator_training._NewCheckpointListenerForEvaluate  # noqa: SLF001
        evaluations = [x for x in listeners if isinstance(x, evaluation_type)]
        if evaluations:
            log.info("train_and_evaluate under %d instances: evaluating once, after training, "
                     "on every instance", self._num_instances)
        return [x for x in listeners if not isinstance(x, evaluation_type)], evaluations

    def _barrier(self) -> None:
        if self._num_instances == 1:
            return
        if _uses_tf_collectives(self._train_strategy):
            # An all-reduce over the instances through this worker's TensorFlow server: eager,
            # or in a session of its own when eager execution is off.
            strategy = self._train_strategy

            def all_reduce():
                with tf.device(strategy.extended.worker_devices[0]):
                    done = tf.identity(0.0)
                return strategy.reduce(tf.distribute.ReduceOp.SUM, done, axis=None)

            if tf.executing_eagerly():
                all_reduce()
                return
            with tf.Graph().as_default():
                done = all_reduce()
                with tf.compat.v1.Session(self._config.master,
                                          config=self._session_config) as session:
                    session.run(done)
        else:
            from popdist_launcher import collectives
            if tf.executing_eagerly():
                collectives.allreduce(tf.constant(0.0), op=collectives.Sum,
                                      name="ipu_estimator_barrier")
                return
            # Graph mode (eager execution off): an op only waits when a session runs it.
            with tf.Graph().as_default():
                done = collectives.allreduce(tf.constant(0.0), op=collectives.Sum,
                                             name="ipu_estimator_barrier")
                with tf.compat.v1.Session(config=self._session_config) as session:
                    session.run(done)

    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None,
                           as_text=False, checkpoint_path=None, experimental_mode=ModeKeys.PREDICT):
        """Export on the chief only (other instances return None); the exported graph is the
        plain single-replica model."""
        if not self._is_chief:
            log.info("instance %d: export_saved_model is done by the chief", self._instance_index)
            return None
        self._exporting.active = True
        try:
            with long_phase("IPUEstimator export"):  # not a hang (poprun-lite's hang check)
                return super().export_saved_model(export_dir_base, serving_input_receiver_fn,
                                                  assets_extra=assets_extra, as_text=as_text,
                                                  checkpoint_path=checkpoint_path,
                                                  experimental_mode=experimental_mode)
        finally:
            self._exporting.active = False

    def _evaluate_run(self, checkpoint_path, scaffold, update_op, eval_dict, all_hooks,
                      output_dir):
        if self._is_chief:
            with long_phase("IPUEstimator evaluation"):  # not a hang (the hang check)
                return super()._evaluate_run(checkpoint_path, scaffold, update_op, eval_dict,
                                             all_hooks, output_dir)
        from tensorflow.python.training import evaluation  # not in the public API
        return evaluation._evaluate_once(  # noqa: SLF001 - same run, no summaries written
            checkpoint_path=checkpoint_path, master=self._config.evaluation_master,
            scaffold=scaffold, eval_ops=update_op, final_ops=eval_dict, hooks=all_hooks,
            config=self._session_config)

    def _create_and_assert_global_step(self, graph):
        with self._train_strategy.scope():
            return super()._create_and_assert_global_step(graph)

    # ---- input ---------------------------------------------------------------------------
    def _call_input_fn(self, input_fn, mode, input_context=None):
        from tensorflow_estimator.python.estimator import util as estimator_util

        params = dict(self.params)
        if self._batch_sizes[mode] is not None:
            params["batch_size"] = self._batch_sizes[mode]
        takes_context = "input_context" in estimator_util.fn_args(input_fn)
        context = tf.distribute.InputContext(
            num_input_pipelines=self._num_instances, input_pipeline_id=self._instance_index,
            num_replicas_in_sync=self._num_instances * self._num_local)
        with tf.device("/device:CPU:0"):
            dataset = _call_with_accepted(input_fn, params=params, mode=mode,
                                          config=self.config, input_context=context)
            if not isinstance(dataset, tf.data.Dataset):
                raise ValueError(
                    f"input_fn must return a tf.data.Dataset of per-replica batches, got "
                    f"{type(dataset).__name__}.")
            if not takes_context:
                self._warn_if_not_sharded(dataset)
            return self._replica_batches(dataset, mode)

    def _warn_if_not_sharded(self, dataset: tf.data.Dataset) -> None:
        """Once per estimator, on instance 0: say how to shard an input that is not sharded."""
        from popdist_launcher.ipu_runtime.datasets import is_sharded

        if self._num_instances == 1 or self._instance_index != 0 or self._warned_not_sharded:
            return
        if is_sharded(dataset):
            return
        self._warned_not_sharded = True
        log.warning(
            "The IPUEstimator does not shard the input_fn's dataset across instances (as "
            "Graphcore's): each of the %d instances reads all of it, so every sample is seen %d "
            "times per epoch. Shard it in the input_fn before batching: dataset = dataset.shard("
            "popdist.getNumInstances(), popdist.getInstanceIndex()), or take input_context and "
            "shard with input_context.num_input_pipelines and input_pipeline_id.",
            self._num_instances, self._num_instances)

    def _replica_batches(self, dataset: tf.data.Dataset, mode: str):
        """Elements of [iterations, local replicas, per-replica batch, ...]: what one
        Session.run of this instance consumes (each local replica its own batches)."""
        batch_size = self._batch_sizes[mode]
        if batch_size is not None:
            # Replicas step together on static shapes (as on the IPU): a short last batch
            # cannot be stacked with full ones, so it is left out.
            def full(*xs):
                first = tf.nest.flatten(xs)[0]
                return tf.equal(tf.shape(first)[0], batch_size)
            dataset = dataset.filter(full)
        dataset = dataset.batch(self._num_local, drop_remainder=True)
        dataset = dataset.batch(self._iterations(mode), drop_remainder=True)
        prefetch = self._ipu_run_config.prefetch_depth
        return dataset.prefetch(prefetch if prefetch else tf.data.AUTOTUNE)

    # ---- the replicated model function ---------------------------------------------------
    def _replicated_model_fn(self, features, labels, mode, params, config):
        if getattr(self._exporting, "active", False):
            return _as_estimator_spec(self._call_user(features, labels, mode, params, config),
                                           mode)
        strategy = self._strategy(mode)
        offset = self._instance_index * self._num_local
        specs = []

        def replica_fn(features, labels, after):
            # Entered here, in the replica's own thread (a strategy may run replicas in threads
            # of their own, which do not see the caller's control dependencies).
            with tf.control_dependencies(after):
                spec = self._call_user(features, labels, mode, params, config)
            specs.append(spec)
            return _replica_outputs(spec, mode)

        def distribute(structure):
            if structure is None:
                return None
            return strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.nest.map_structure(
                    lambda t: t[ctx.replica_id_in_sync_group - offset], structure))

        def run_step(step_features, step_labels, after=()):
            """One step of every local replica; every op of the model_fn runs after ``after``."""
            # As tf.estimator does: TF1 optimizers then divide each replica's loss by the number
            # of replicas, so summed gradients are the gradient of the global mean loss.
            with strategy.scope(), strategy._scale_loss_for_estimator_enabled():  # noqa: SLF001
                return strategy.run(replica_fn, args=(distribute(step_features),
                                                      distribute(step_labels)),
                                    kwargs={"after": list(after)})

        if mode == ModeKeys.TRAIN:
            return self._train_spec(strategy, features, labels, run_step, specs)
        first = lambda t: t[0]  # noqa: E731 - one iteration per run outside training
        outputs = run_step(tf.nest.map_structure(first, features),
                           None if labels is None else tf.nest.map_structure(first, labels))
        if mode == ModeKeys.EVAL:
            return self._eval_spec(strategy, outputs, specs)
        return self._predict_spec(strategy, outputs, specs)

    def _call_user(self, features, labels, mode, params, config):
        spec = _call_with_accepted(self._user_model_fn, features=features, labels=labels,
                                   mode=mode, params=params, config=self.config)
        if not isinstance(spec, (IPUEstimatorSpec, tf.estimator.EstimatorSpec)):
            raise ValueError(f"model_fn must return an IPUEstimatorSpec or EstimatorSpec, got "
                             f"{type(spec).__name__}.")
        return spec

    def _train_spec(self, strategy, features, labels, run_step, specs):
        iterations = self._iterations(ModeKeys.TRAIN)
        global_step = tf.compat.v1.train.get_global_step()
        # The step this run starts from, read before any step of the loop runs: the user's
        # train_op may increment the global step itself (minimize(..., global_step=...)), and
        # nothing else orders that increment after this read. It enters the loop as a loop
        # variable, and every op of the model_fn and host_call waits for it.
        start_step = global_step.read_value()

        def body(i, total_loss, start):
            step_features = tf.nest.map_structure(lambda t: t[i], features)
            step_labels = None if labels is None else tf.nest.map_structure(lambda t: t[i], labels)
            # Names as outside the loop (evaluation and prediction run no loop): TF1 graphs
            # name Keras layers' variables after the name scope, and evaluation must restore
            # what training saved.
            with tf.compat.v1.get_default_graph().name_scope(None):
                outputs = run_step(step_features, step_labels, after=[start])
            deps = list(strategy.experimental_local_results(outputs["done"]))
            if "host_call" in outputs:
                deps += _run_host_call(strategy, specs[0].host_call[0],
                                            outputs["host_call"], after=[start])
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, outputs["loss"], axis=None)
            with tf.control_dependencies(deps):
                # Set, not add: right whether or not the user's train_op counts steps too.
                count = global_step.assign(start + tf.cast(i + 1, start.dtype))
            with tf.control_dependencies([count]):
                return i + 1, total_loss + tf.cast(loss, tf.float32), tf.identity(start)

        _, total, _ = tf.compat.v1.while_loop(
            lambda i, *_: i < iterations, body,
            [tf.constant(0), tf.constant(0.0), start_step], parallel_iterations=1,
            back_prop=False)
        spec = specs[0]
        # Every run ends exactly iterations_per_loop steps on, on every instance: the stop hook
        # and checkpoint hooks read this value, and instances must agree on when to stop.
        with tf.control_dependencies([total]):
            train_op = tf.group(global_step.assign(start_step + iterations))
        chief_hooks = getattr(spec, "training_chief_hooks", ()) if self._is_chief else ()
        return tf.estimator.EstimatorSpec(
            ModeKeys.TRAIN, loss=total / iterations, train_op=train_op,
            training_hooks=list(spec.training_hooks), training_chief_hooks=list(chief_hooks),
            scaffold=getattr(spec, "scaffold", None))

    def _eval_spec(self, strategy, outputs, specs):
        spec = specs[0]
        loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, outputs["loss"], axis=None)
        metric_ops: Dict[str, Any] = {}
        for name, (value, update) in outputs.get("eval_metric_ops", {}).items():
            metric_ops[name] = (strategy.experimental_local_results(value)[0],
                                tf.group(strategy.experimental_local_results(update)))
        if "eval_metrics" in outputs:
            fn = spec.eval_metrics[0]
            tensors = [self._all_replicas(strategy, t) for t in outputs["eval_metrics"]]
            with tf.device("/device:CPU:0"):
                metric_ops.update(fn(*tensors))
        return tf.estimator.EstimatorSpec(
            ModeKeys.EVAL, loss=loss, eval_metric_ops=metric_ops,
            evaluation_hooks=list(spec.evaluation_hooks), scaffold=getattr(spec, "scaffold", None))

    def _all_replicas(self, strategy, t):
        """Every replica's ``t`` of every instance, concatenated on dimension 0."""
        if self._num_instances > 1 and _uses_tf_collectives(strategy):
            return strategy.gather(t, axis=0)  # in global replica order
        local = tf.concat(strategy.experimental_local_results(t), axis=0)
        if self._num_instances == 1:
            return local
        from popdist_launcher import collectives
        return collectives.allgather(local)

    def _predict_spec(self, strategy, outputs, specs):
        spec = specs[0]
        predictions = tf.nest.map_structure(
            lambda t: tf.concat(strategy.experimental_local_results(t), axis=0),
            outputs["predictions"])
        return tf.estimator.EstimatorSpec(
            ModeKeys.PREDICT, predictions=predictions, prediction_hooks=list(spec.prediction_hooks),
            scaffold=getattr(spec, "scaffold", None),
            export_outputs=getattr(spec, "export_outputs", None))


def _replica_outputs(spec, mode: str) -> Dict[str, Any]:
    """What one replica's step hands back from its ``model_fn`` spec in ``mode``."""
    out: Dict[str, Any] = {}
    if mode == ModeKeys.PREDICT:
        out["predictions"] = spec.predictions
        return out
    out["loss"] = spec.loss
    if mode == ModeKeys.TRAIN:
        if spec.train_op is None:
            raise ValueError("model_fn returned no train_op in TRAIN mode.")
        host_call = getattr(spec, "host_call", None)
        with tf.control_dependencies([spec.train_op]):
            out["done"] = tf.constant(True)
            if host_call is not None:
                # After the step's train_op, as on the IPU (the tensors leave the device
                # when the step has run).
                out["host_call"] = [tf.identity(t) for t in host_call[1]]
    else:
        eval_metrics = getattr(spec, "eval_metrics", None)
        if eval_metrics is not None:
            out["eval_metrics"] = list(eval_metrics[1])
        if spec.eval_metric_ops:
            out["eval_metric_ops"] = {k: tuple(v) for k, v in spec.eval_metric_ops.items()}
    return out


def _run_host_call(strategy, fn: Callable, tensors, after=()) -> list:
    """Run host_call's ``fn`` on the host, once per replica with that replica's tensors, in
    replica context (as Graphcore's IPUEstimator under a strategy): an optimizer's
    ``apply_gradients`` there reduces the gradients over every replica of every instance
    and updates the mirrored variables. Its ops run after ``after``. Returns what to run
    with the step."""
    def on_host(*replica_tensors):
        with tf.device("/device:CPU:0"), tf.control_dependencies(list(after)):
            return fn(*replica_tensors)

    # As for the model_fn: TF1 optimizers divide by the number of replicas.
    with strategy.scope(), strategy._scale_loss_for_estimator_enabled():  # noqa: SLF001
        result = strategy.run(on_host, args=tuple(tensors))
    return [r for r in tf.nest.flatten(strategy.experimental_local_results(result))
            if r is not None]


def _as_estimator_spec(spec, mode):
    """A ``model_fn``'s spec as tf.estimator's EstimatorSpec."""
    if isinstance(spec, tf.estimator.EstimatorSpec):
        return spec
    return tf.estimator.EstimatorSpec(mode, predictions=spec.predictions, loss=spec.loss,
                                      train_op=spec.train_op)


# The n-th IPUEstimator built without a model_dir in this process: every instance runs the same
# program, so the n-th one is the same estimator on every instance.
_unnamed_model_dirs = itertools.count()


def _job_model_dir(num_instances: int) -> str:
    """One model_dir for an estimator built without one, the same on every instance of the job
    (tf.estimator would give each process a temporary folder of its own, and the instances that
    do not write checkpoints would never see the chief's)."""
    from popdist_launcher.wire import contract

    parsed = tf_config.from_environ()
    addresses = [a for tasks in (parsed.cluster.values() if parsed else ()) for a in tasks]
    hosts = {a.rsplit(":", 1)[0] for a in addresses}
    if parsed is None and os.environ.get("HOROVOD_LOCAL_SIZE") == str(num_instances):
        hosts = {"this host"}  # no TF_CONFIG (--tf-config none): all instances are local ones
    job_id = os.environ.get(contract.JOB_ID)
    if len(hosts) != 1 or not job_id:
        where = f"on {len(hosts)} hosts" if len(hosts) > 1 else "without poprun-lite's job id"
        raise ValueError(
            f"IPUEstimator: model_dir is None but the {num_instances} instances run {where}; "
            f"only the chief writes checkpoints and every instance reads them, so pass "
            f"model_dir= (or RunConfig(model_dir=...)) a folder every instance can read.")
    path = os.path.join(tempfile.gettempdir(), f"poprun-lite-{job_id}",
                        f"model_dir_{next(_unnamed_model_dirs)}")
    log.info("IPUEstimator: model_dir is None; every instance uses %s", path)
    return path


def _uses_tf_collectives(strategy) -> bool:
    """True for IPUMultiWorkerStrategy: TensorFlow's collectives, not Horovod, join instances."""
    from popdist_launcher.strategies import IPUMultiWorkerStrategy
    return isinstance(strategy, IPUMultiWorkerStrategy)


def _call_with_accepted(fn: Callable, **available: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature names (tf.estimator's convention)."""
    from tensorflow_estimator.python.estimator import util as estimator_util

    accepted = estimator_util.fn_args(fn)
    return fn(**{name: value for name, value in available.items() if name in accepted})
