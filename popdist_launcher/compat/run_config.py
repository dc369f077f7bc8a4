"""poprun-lite's TF_CONFIG under ``--tf-config auto`` (the default), as tf.estimator's RunConfig
sees it: the cluster only for a RunConfig whose strategy asks for one, none for a plain one.

The instances' TF_CONFIG is the worker cluster (what MultiWorkerMirroredStrategy reads). A
``RunConfig(train_distribute=...)`` (or ``eval_distribute``, ``experimental_distribute``) with a
multi-worker strategy reads it as it is; any other RunConfig is built as under horovodrun, with no
cluster (a plain tf.estimator + Horovod program), or, in the ``--evaluator`` process, with the
cluster's first worker as its "chief" (the only layout a strategy-less evaluator accepts).
``os.environ`` is never changed: the RunConfig module alone reads a view of it (per thread, per
context) while a RunConfig is built, so other threads and a program's own
``json.loads(os.environ["TF_CONFIG"])`` keep the real value.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import os
from typing import Any, Iterator, Mapping, Optional

from popdist_launcher import tf_config
from popdist_launcher.wire import contract

# What the RunConfig module reads as os.environ while a RunConfig is built here (None: os.environ).
_ENVIRON: contextvars.ContextVar[Optional[Mapping[str, str]]] = contextvars.ContextVar(
    "run_config_environ", default=None)


class _OsWithEnvironView:
    """The ``os`` module as the RunConfig module sees it: ``environ`` is the view while one is
    set, everything else is ``os``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @property
    def environ(self) -> Mapping[str, str]:
        view = _ENVIRON.get()
        return os.environ if view is None else view


def _module():
    from tensorflow_estimator.python.estimator import run_config

    return run_config


def _install_view(module) -> None:
    if not isinstance(module.os, _OsWithEnvironView):
        module.os = _OsWithEnvironView()


@contextlib.contextmanager
def tf_config_seen_as(value: Optional[str]) -> Iterator[None]:
    """While this thread builds a RunConfig inside the block, it reads TF_CONFIG as ``value``
    (None: unset); nothing else sees a change."""
    _install_view(_module())
    environ = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    if value is not None:
        environ["TF_CONFIG"] = value
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def asks_for_cluster(strategy: Any) -> bool:
    """True for a strategy that joins the instances over TF_CONFIG's cluster: TensorFlow's
    MultiWorkerMirroredStrategy (V1 and V2) and IPUMultiWorkerStrategy, its subclass."""
    if strategy is None:
        return False
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective

    return isinstance(strategy, (collective.CollectiveAllReduceStrategy,
                                 collective.CollectiveAllReduceStrategyV1))


def seen_tf_config(strategies, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The TF_CONFIG a RunConfig built with ``strategies`` reads under auto: the real one with a
    strategy that asks for a cluster, else "" (none) for a training instance, or the evaluator's
    with a "chief"; the real one too when poprun-lite's auto mode did not write it."""
    env = os.environ if env is None else env
    real = env.get("TF_CONFIG")
    if env.get(contract.TF_CONFIG_AUTO) != "1" or not real or any(
            asks_for_cluster(s) for s in strategies):
        return real
    parsed = tf_config.parse(real)
    if parsed.task_type != tf_config.EVALUATOR:
        return None
    cluster = tf_config.cluster_of(parsed.cluster.get(tf_config.WORKER, []), tf_config.CHIEF)
    cluster[tf_config.EVALUATOR] = parsed.cluster.get(tf_config.EVALUATOR, [])
    return json.dumps({"cluster": cluster, "task": {"type": tf_config.EVALUATOR, "index": 0}})


def _strategies(arguments: Mapping[str, Any]) -> list:
    strategies = [arguments.get("train_distribute"), arguments.get("eval_distribute")]
    distribute = arguments.get("experimental_distribute")
    if distribute is not None:
        strategies += [getattr(distribute, "train_distribute", None),
                       getattr(distribute, "eval_distribute", None)]
    return strategies


def install(module) -> None:
    """The site hook (POPRUN_TF_CONFIG_AUTO=1), once the RunConfig module has imported: every
    RunConfig is built with ``seen_tf_config``'s TF_CONFIG."""
    _install_view(module)
    run_config = module.RunConfig
    build = run_config.__init__
    if getattr(build, "_poprun_auto", False):
        return
    signature = inspect.signature(build)

    @functools.wraps(build)
    def __init__(self, *args, **kwargs):
        if _ENVIRON.get() is not None:  # a view is set already (IPU's RunConfig, a subclass)
            return build(self, *args, **kwargs)
        arguments = signature.bind_partial(self, *args, **kwargs).arguments
        seen = seen_tf_config(_strategies(arguments))
        if seen == os.environ.get("TF_CONFIG"):
            return build(self, *args, **kwargs)
        with tf_config_seen_as(seen):
            return build(self, *args, **kwargs)

    __init__._poprun_auto = True
    run_config.__init__ = __init__
