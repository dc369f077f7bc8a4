"""What passes between the IPUEstimator and the user's functions: ``IPUEstimatorSpec`` (what a
model_fn returns), what one replica hands back from it, and tf.estimator's convention of calling a
function with the arguments it names."""
from __future__ import annotations

import collections
from typing import Any, Callable, Dict

import tensorflow as tf

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
    __module__ = "popdist_launcher.ipu.ipu_estimator"  # its public home (and Graphcore's)

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


def replica_outputs(spec, mode: str) -> Dict[str, Any]:
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


def as_estimator_spec(spec, mode):
    """A ``model_fn``'s spec as tf.estimator's EstimatorSpec."""
    if isinstance(spec, tf.estimator.EstimatorSpec):
        return spec
    return tf.estimator.EstimatorSpec(mode, predictions=spec.predictions, loss=spec.loss,
                                      train_op=spec.train_op)


def call_with_accepted(fn: Callable, **available: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature names (tf.estimator's convention)."""
    from tensorflow_estimator.python.estimator import util as estimator_util

    accepted = estimator_util.fn_args(fn)
    return fn(**{name: value for name, value in available.items() if name in accepted})
