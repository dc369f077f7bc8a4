"""``ipu.ipu_run_config``: IPURunConfig and a RunConfig that understands poprun-lite's TF_CONFIG.

TensorFlow's RunConfig rejects a cluster of workers without a "chief"; poprun-lite writes exactly
that (worker 0 is the chief, as in MultiWorkerMirroredStrategy), so this RunConfig reads TF_CONFIG
itself and exposes task_type, task_id, is_chief and num_worker_replicas from it. Its cluster_spec
stays empty: every instance runs a local estimator joined to the others by the strategy, so
``tf.estimator.train_and_evaluate`` trains and evaluates on every instance.
"""
from __future__ import annotations

import collections
from typing import Any, Optional

import tensorflow as tf

from popdist_launcher import runtime, tf_config
from popdist_launcher.compat.run_config import tf_config_seen_as
from popdist_launcher.ipu import config as ipu_config


class IPURunConfig(collections.namedtuple(
        "IPURunConfig", ["iterations_per_loop", "ipu_options", "num_replicas", "num_shards",
                         "ordinal", "prefetch_depth"])):
    """IPU-specific settings of an IPUEstimator (Graphcore's field names).

    iterations_per_loop: training steps run by one ``Session.run`` (an in-graph loop over the
    dataset); the global step advances by this much per run. num_replicas: replicas of this
    instance. num_shards: devices per replica. ipu_options: an ``ipu.config.IPUConfig``; when
    given, it must select num_replicas x num_shards IPUs.
    """

    __slots__ = ()

    def __new__(cls, iterations_per_loop: int = 1, ipu_options=None, num_replicas: int = 1,
                num_shards: int = 1, ordinal: int = 0, prefetch_depth: Optional[int] = None):
        for name, value in (("iterations_per_loop", iterations_per_loop),
                            ("num_replicas", num_replicas), ("num_shards", num_shards)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"IPURunConfig.{name} must be a positive int, got {value!r}.")
        if prefetch_depth is not None and (not isinstance(prefetch_depth, int)
                                           or prefetch_depth < 1):
            raise ValueError(f"IPURunConfig.prefetch_depth must be a positive int or None, "
                             f"got {prefetch_depth!r}.")
        wanted = num_replicas * num_shards
        if ipu_options is None:
            if wanted > 1:
                raise ValueError(
                    f"IPURunConfig wants {num_replicas} replica(s) x {num_shards} shard(s) = "
                    f"{wanted} IPUs but ipu_options is None; pass an ipu.config.IPUConfig with "
                    f"auto_select_ipus = {wanted}.")
        else:
            selected = ipu_config.validate(ipu_options)
            if selected != wanted:
                raise ValueError(
                    f"ipu_options selects {selected} IPU(s) but IPURunConfig wants "
                    f"num_replicas x num_shards = {num_replicas} x {num_shards} = {wanted}; make "
                    f"them equal.")
        return super().__new__(cls, iterations_per_loop, ipu_options, num_replicas, num_shards,
                               ordinal, prefetch_depth)


class RunConfig(tf.estimator.RunConfig):
    """tf.estimator.RunConfig plus ``ipu_run_config``; TF_CONFIG is read by popdist_launcher.

    Every tf.estimator.RunConfig argument is accepted, ``train_distribute`` and
    ``eval_distribute`` included.
    """

    def __init__(self, ipu_run_config: Optional[IPURunConfig] = None, master: Optional[str] = None,
                 **kwargs: Any) -> None:
        parsed = tf_config.from_environ()  # one-sentence errors for a malformed TF_CONFIG
        with tf_config_seen_as(None):  # read above; the estimator itself sees none
            super().__init__(**kwargs)
        self._ipu_run_config = ipu_run_config or IPURunConfig()
        self._tf_config = parsed
        if parsed is not None and parsed.cluster:
            self._task_type = parsed.task_type
            self._task_id = parsed.task_id
            self._is_chief = parsed.is_chief
            self._num_worker_replicas = parsed.num_workers
            self._num_ps_replicas = len(parsed.cluster.get(tf_config.PS, ()))
            self._global_id_in_cluster = parsed.worker_index
        elif runtime.context().num_instances > 1:  # no TF_CONFIG (poprun-lite --tf-config none)
            ctx = runtime.context()
            self._task_type, self._task_id = tf_config.WORKER, ctx.instance_index
            self._is_chief = ctx.instance_index == 0
            self._num_worker_replicas = ctx.num_instances
            self._global_id_in_cluster = ctx.instance_index
        if master is not None:
            self._master = master

    @property
    def ipu_run_config(self) -> IPURunConfig:
        return self._ipu_run_config

    @property
    def master(self) -> str:
        return self._master

    def replace(self, **kwargs: Any) -> "RunConfig":
        ipu_run_config = kwargs.pop("ipu_run_config", self._ipu_run_config)
        new = super().replace(**kwargs)
        new._ipu_run_config = ipu_run_config
        return new
