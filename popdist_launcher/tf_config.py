"""Build, parse and validate ``TF_CONFIG``, with the rules ``tf.estimator.RunConfig`` applies.

Pure Python: the launcher uses it to write each instance's TF_CONFIG without importing TensorFlow,
and the runtime uses it to read one back with errors that say what to fix.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

from popdist_launcher.wire import contract

CHIEF = "chief"
WORKER = "worker"
PS = "ps"
EVALUATOR = "evaluator"
MASTER = "master"
KNOWN_TASK_TYPES = (CHIEF, WORKER, PS, EVALUATOR, MASTER)
AUTO = "auto"
# What poprun-lite's --tf-config writes: "auto" (the default) = the worker cluster, which
# tf.estimator's RunConfig applies only with a strategy that asks for a cluster (a plain RunConfig
# sees none: popdist_launcher.compat.run_config); "worker" = every instance a worker (worker 0 is
# the chief, as MultiWorkerMirroredStrategy reads it), seen by every RunConfig; "chief" = instance 0
# is the "chief" task, the others workers 0..N-2 (the cluster tf.estimator's RunConfig wants);
# "none" = no TF_CONFIG (horovodrun).
MODES = (AUTO, WORKER, CHIEF, "none")
# The end of tf.estimator.RunConfig's error for a cluster without a chief (TF 2.x estimator).
NO_CHIEF_ERROR = 'must have one "chief" node'
NO_CHIEF_HINT = (
    'tf.estimator wants a "chief" task in TF_CONFIG: drop --tf-config worker (the default, '
    "--tf-config auto, gives a plain RunConfig no cluster, as under horovodrun), or use "
    "--tf-config chief for tf.estimator's distributed mode (instance 0 becomes the chief).")


class TFConfigError(ValueError):
    """TF_CONFIG is malformed or inconsistent."""


class TFConfig(NamedTuple):
    """A validated TF_CONFIG: the cluster and this process's task in it."""

    cluster: Dict[str, List[str]]
    task_type: Optional[str]
    task_id: int
    environment: Optional[str] = None

    @property
    def is_chief(self) -> bool:
        """The chief writes checkpoints and summaries: the `chief` task, else `master`,
        else worker 0."""
        if not self.cluster:
            return True
        if CHIEF in self.cluster:
            return self.task_type == CHIEF
        if MASTER in self.cluster:
            return self.task_type == MASTER
        return self.task_type == WORKER and self.task_id == 0

    @property
    def num_workers(self) -> int:
        """Tasks that train: chief (or master) plus workers; at least 1."""
        return max(1, sum(len(self.cluster.get(t, ())) for t in (CHIEF, MASTER, WORKER)))

    @property
    def worker_index(self) -> int:
        """This task's index among the training tasks, chief first (0 for an evaluator or ps)."""
        if self.task_type in (CHIEF, MASTER):
            return 0
        if self.task_type == WORKER:
            return (self.task_id + len(self.cluster.get(CHIEF, ()))
                    + len(self.cluster.get(MASTER, ())))
        return 0

    @property
    def address(self) -> Optional[str]:
        """This task's host:port, or None for a task outside the cluster (an evaluator given
        only the training cluster)."""
        tasks = self.cluster.get(self.task_type or "", [])
        return tasks[self.task_id] if self.task_id < len(tasks) else None

    def to_json(self) -> str:
        task = {"type": self.task_type, "index": self.task_id} if self.task_type else {}
        config: dict = {"cluster": self.cluster, "task": task}
        if self.environment:
            config["environment"] = self.environment
        return json.dumps(config, separators=(",", ":"))


def build(workers: Sequence[str], index: int, chief: Optional[str] = None) -> TFConfig:
    """TF_CONFIG for worker ``index`` of ``workers`` (plus an optional separate ``chief`` task)."""
    cluster: Dict[str, List[str]] = {WORKER: list(workers)}
    if chief is not None:
        cluster[CHIEF] = [chief]
    return validate({"cluster": cluster, "task": {"type": WORKER, "index": index}})


def cluster_of(addresses: Sequence[str], mode: str) -> Dict[str, List[str]]:
    """The cluster poprun-lite writes for instances at ``addresses`` (instance order) in ``mode``
    (auto, worker or chief)."""
    if mode in (AUTO, WORKER):
        return {WORKER: list(addresses)}
    if mode == CHIEF:
        cluster = {CHIEF: list(addresses[:1])}
        if len(addresses) > 1:
            cluster[WORKER] = list(addresses[1:])
        return cluster
    raise TFConfigError(f"TF_CONFIG mode {mode!r} has no cluster; expected auto, worker or chief.")


def for_instance(addresses: Sequence[str], index: int, mode: str) -> Optional[TFConfig]:
    """The TF_CONFIG of instance ``index`` in ``mode`` (one of MODES); None for "none"."""
    if mode == "none":
        return None
    task = {"type": WORKER, "index": index}
    if mode == CHIEF:
        task = {"type": CHIEF, "index": 0} if index == 0 else {"type": WORKER, "index": index - 1}
    return validate({"cluster": cluster_of(addresses, mode), "task": task})


def for_evaluator(addresses: Sequence[str], mode: str, address: str) -> TFConfig:
    """The TF_CONFIG of an evaluator at ``address`` beside instances at ``addresses``: their
    cluster plus an "evaluator" job of its own, the partition TensorFlow's multi-worker code wants
    (a MultiWorkerMirroredStrategy built by the evaluator serves on that address; the training
    tasks never contact it)."""
    return validate({"cluster": {**cluster_of(addresses, mode), EVALUATOR: [address]},
                     "task": {"type": EVALUATOR, "index": 0}})


def require_cluster(who: str, env: Optional[Mapping[str, str]] = None) -> None:
    """Raise when ``who`` (a strategy that joins instances over TF_CONFIG's cluster) runs as one
    of several poprun-lite instances that were given no TF_CONFIG (``--tf-config none``)."""
    env = os.environ if env is None else env
    parsed = from_environ(env)
    count = env.get(contract.NUM_INSTANCES, "1")
    if (parsed is None or not parsed.cluster) and count.isdigit() and int(count) > 1:
        raise TFConfigError(
            f"{who} needs a TF_CONFIG cluster, but this instance of {count} has no TF_CONFIG "
            f"(poprun-lite --tf-config none); run with --tf-config auto (the default), worker or "
            f"chief.")


def parse(text: str) -> TFConfig:
    """Parse and validate a TF_CONFIG JSON string."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TFConfigError(
            f"TF_CONFIG is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f'expected e.g. {{"cluster": {{"worker": ["host:port", ...]}}, '
            f'"task": {{"type": "worker", "index": 0}}}}.'
        ) from None
    return validate(raw)


def from_environ(env: Optional[Mapping[str, str]] = None) -> Optional[TFConfig]:
    """The validated TF_CONFIG of this process, or None when it is unset or empty."""
    env = os.environ if env is None else env
    text = env.get("TF_CONFIG", "").strip()
    return parse(text) if text else None


def _validate_cluster(raw_cluster: object) -> Dict[str, List[str]]:
    if not isinstance(raw_cluster, dict):
        raise TFConfigError(
            f'TF_CONFIG "cluster" must be an object mapping task types to lists of "host:port", '
            f"got {type(raw_cluster).__name__}."
        )
    cluster: Dict[str, List[str]] = {}
    for job, tasks in raw_cluster.items():
        if isinstance(tasks, dict):  # {"0": "host:port"} form accepted by ClusterSpec
            try:
                tasks = [tasks[k] for k in sorted(tasks, key=int)]
            except ValueError:
                raise TFConfigError(
                    f'TF_CONFIG cluster job "{job}" maps non-integer keys; '
                    'use a list of "host:port".'
                ) from None
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise TFConfigError(
                f'TF_CONFIG cluster job "{job}" must be a list of "host:port" strings, '
                f'got {tasks!r}.'
            )
        for address in tasks:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise TFConfigError(
                    f'TF_CONFIG cluster job "{job}" has address {address!r}; expected "host:port" '
                    f"with a port in 1..65535."
                )
        cluster[job] = list(tasks)
    if len(cluster.get(CHIEF, ())) > 1:
        raise TFConfigError(
            f'TF_CONFIG cluster has {len(cluster[CHIEF])} "chief" tasks; there can be at most one.'
        )
    if len(cluster.get(EVALUATOR, ())) > 1:
        raise TFConfigError(
            f'TF_CONFIG cluster has {len(cluster[EVALUATOR])} "evaluator" tasks; there can be at '
            f"most one (TensorFlow evaluates on one process)."
        )
    return cluster


def validate(raw: object) -> TFConfig:
    """Validate an already-decoded TF_CONFIG value."""
    if not isinstance(raw, dict):
        raise TFConfigError(f"TF_CONFIG must be a JSON object, got {type(raw).__name__}.")
    cluster = _validate_cluster(raw.get("cluster", {}))
    task = raw.get("task", {})
    if not isinstance(task, dict):
        raise TFConfigError(f'TF_CONFIG "task" must be an object, got {task!r}.')
    task_type = task.get("type")
    index = task.get("index", 0)
    if cluster and not task_type:
        raise TFConfigError(
            'TF_CONFIG has a "cluster" but no "task" type; '
            'add "task": {"type": "worker", "index": N}.'
        )
    if task_type is not None and not isinstance(task_type, str):
        raise TFConfigError(f'TF_CONFIG "task" type must be a string, got {task_type!r}.')
    if isinstance(index, bool) or not isinstance(index, int):
        if isinstance(index, str) and index.isdigit():
            index = int(index)
        else:
            raise TFConfigError(
                f'TF_CONFIG "task" index must be a non-negative integer, got {index!r}.')
    if index < 0:
        raise TFConfigError(f'TF_CONFIG "task" index must be a non-negative integer, got {index}.')
    if task_type and task_type != EVALUATOR:
        if task_type not in cluster:
            raise TFConfigError(
                f'TF_CONFIG task type "{task_type}" is not a job of the cluster '
                f"({', '.join(sorted(cluster)) or 'empty'}); use one of them."
            )
        if index >= len(cluster[task_type]):
            raise TFConfigError(
                f'TF_CONFIG task index {index} is out of range: job "{task_type}" has '
                f"{len(cluster[task_type])} task(s), so the index must be in "
                f"0..{len(cluster[task_type]) - 1}."
            )
    environment = raw.get("environment")
    return TFConfig(cluster=cluster, task_type=task_type, task_id=index, environment=environment)
