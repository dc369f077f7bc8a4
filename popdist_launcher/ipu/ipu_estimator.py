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

import itertools
import logging
import os
import tempfile
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from popdist_launcher import runtime
from popdist_launcher.whereabouts import long_phase
from popdist_launcher.ipu import _estimator_hooks as estimator_hooks
from popdist_launcher.ipu.ipu_run_config import RunConfig
from popdist_launcher.ipu._estimator_input import (EstimatorInput, per_replica_batch_size,
                                                   unsharded_estimator_input_warning)
from popdist_launcher.ipu._estimator_model_fn import ReplicatedModelFn, uses_tf_collectives
from popdist_launcher.ipu._estimator_spec import IPUEstimatorSpec  # noqa: F401 (public here)

log = logging.getLogger(__name__)
ModeKeys = tf.estimator.ModeKeys

class IPUEstimator(EstimatorInput, ReplicatedModelFn, tf.estimator.Estimator):
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
        self._num_instances, self._instance_index = ctx.num_instances, ctx.instance_index
        self._launched_instances = ctx.num_instances
        if uses_tf_collectives(self._train_strategy):
            # its cluster (TF_CONFIG or the program's resolver) says which worker this is
            extended = self._train_strategy.extended
            self._num_instances, self._instance_index = (extended._num_workers,  # noqa: SLF001
                                                         extended._id_in_cluster)  # noqa: SLF001
        self._is_chief = config.is_chief
        self._num_local = len(self._train_strategy.extended.worker_devices)
        wanted = self._ipu_run_config.num_replicas
        if self._ipu_run_config.ipu_options is not None and wanted != self._num_local:
            raise ValueError(
                f"IPURunConfig.num_replicas is {wanted} but the strategy runs {self._num_local} "
                f"local replica(s) (poprun-lite --num-replicas / --num-instances); "
                f"make them equal.")
        self._batch_sizes = {
            ModeKeys.TRAIN: per_replica_batch_size(train_batch_size, "train_batch_size",
                                                    self._num_instances, self._num_local),
            ModeKeys.EVAL: per_replica_batch_size(eval_batch_size, "eval_batch_size",
                                                   self._num_instances, self._num_local),
            ModeKeys.PREDICT: per_replica_batch_size(predict_batch_size, "predict_batch_size",
                                                      self._num_instances, self._num_local),
        }
        self._user_model_fn = model_fn
        self._exporting = threading.local()
        self._unsharded_input = unsharded_estimator_input_warning()
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
        from popdist_launcher.ipu import config as ipu_config
        from popdist_launcher.ipu_runtime import configured_system

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
        if uses_tf_collectives(self._train_strategy):
            # Graph-mode collectives run in this worker's gRPC server, with the strategy's
            # session config (collective group leader, device filters).
            session_config = self._train_strategy.update_config_proto(
                config.session_config or tf.compat.v1.ConfigProto())
            changes["session_config"] = session_config
            # A master the program gave (its own server of this worker) is kept.
            master = config.master or self._train_strategy.session_target(session_config) or None
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
        every instance. One instance keeps tf.estimator's behaviour; the workers of a cluster
        that the launch does not describe only train.
        """
        listeners = list(saving_listeners or [])
        if self._num_instances == 1:
            return listeners, []
        from tensorflow_estimator.python.estimator import training as estimator_training

        evaluation_type = estimator_training._NewCheckpointListenerForEvaluate  # noqa: SLF001
        evaluations = [x for x in listeners if isinstance(x, evaluation_type)]
        if self._launched_instances == 1:
            # Workers of a cluster the launch does not describe (the program's resolver): as
            # TensorFlow's distribute coordinator runs train_and_evaluate there (and so under
            # Graphcore's strategy), workers only train; an evaluator task evaluates.
            return [x for x in listeners if not isinstance(x, evaluation_type)], []
        if evaluations:
            log.info("train_and_evaluate under %d instances: evaluating once, after training, "
                     "on every instance", self._num_instances)
        return [x for x in listeners if not isinstance(x, evaluation_type)], evaluations

    def _barrier(self) -> None:
        if self._num_instances == 1:
            return
        if uses_tf_collectives(self._train_strategy):
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


# The n-th IPUEstimator built without a model_dir in this process: every instance runs the same
# program, so the n-th one is the same estimator on every instance.
_unnamed_model_dirs = itertools.count()


def _job_model_dir(num_instances: int) -> str:
    """One model_dir for an estimator built without one, the same on every instance of the job
    (tf.estimator would give each process a temporary folder of its own, and the instances that
    do not write checkpoints would never see the chief's)."""
    from popdist_launcher import tf_config
    from popdist_launcher.compat.poprun_environment import launch_variable
    from popdist_launcher.wire import contract

    parsed = tf_config.from_environ()
    addresses = [a for tasks in (parsed.cluster.values() if parsed else ()) for a in tasks]
    hosts = {a.rsplit(":", 1)[0] for a in addresses}
    if parsed is None and launch_variable("HOROVOD_LOCAL_SIZE") == str(num_instances):
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
