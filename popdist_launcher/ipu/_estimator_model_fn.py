"""The IPUEstimator's model_fn, replicated: the user's model_fn on every local replica under the
strategy; training as a loop of ``iterations_per_loop`` steps in one Session.run, with host_call
on the host; evaluation's metrics over every replica of every instance; prediction."""
from __future__ import annotations

from typing import Any, Callable, Dict

import tensorflow as tf

from popdist_launcher.ipu._estimator_spec import (IPUEstimatorSpec, as_estimator_spec,
                                                  call_with_accepted, replica_outputs)

ModeKeys = tf.estimator.ModeKeys


class ReplicatedModelFn:
    """The model_fn methods of ``IPUEstimator`` (a base class of it: tf.estimator calls
    ``_replicated_model_fn`` as the model_fn). They read the estimator's ``config``,
    ``_user_model_fn``, ``_exporting``, ``_num_instances``, ``_instance_index``, ``_num_local``,
    ``_is_chief``, ``_strategy(mode)`` and ``_iterations(mode)``."""

    def _replicated_model_fn(self, features, labels, mode, params, config):
        if getattr(self._exporting, "active", False):
            return as_estimator_spec(self._call_user(features, labels, mode, params, config),
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
            return replica_outputs(spec, mode)

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
        spec = call_with_accepted(self._user_model_fn, features=features, labels=labels,
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
                deps += run_host_call(strategy, specs[0].host_call[0],
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
        if self._num_instances > 1 and uses_tf_collectives(strategy):
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


def run_host_call(strategy, fn: Callable, tensors, after=()) -> list:
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


def uses_tf_collectives(strategy) -> bool:
    """True for IPUMultiWorkerStrategy: TensorFlow's collectives, not Horovod, join instances."""
    from popdist_launcher.strategies import IPUMultiWorkerStrategy
    return isinstance(strategy, IPUMultiWorkerStrategy)
