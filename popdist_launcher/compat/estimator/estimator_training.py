"""tf.estimator's use of TensorFlow's distribute coordinator (RunConfig's strategy set-up,
``train_and_evaluate``), for ``tensorflow.python.distribute.estimator_training``
(removed in 2.16)."""
from __future__ import annotations

import copy
import logging
from typing import Callable, Dict, List, Optional

from tensorflow.python.distribute import distribute_coordinator as coordinator
from tensorflow.python.distribute import distribute_coordinator_context as coordinator_context
from tensorflow.python.distribute import multi_worker_util
from tensorflow.python.training import server_lib

log = logging.getLogger(__name__)

CHIEF, EVALUATOR, PS, WORKER = "chief", "evaluator", "ps", "worker"
STANDALONE_CLIENT = coordinator.CoordinatorMode.STANDALONE_CLIENT
INDEPENDENT_WORKER = coordinator.CoordinatorMode.INDEPENDENT_WORKER


def _jobs(cluster_spec) -> Dict[str, List[str]]:
    return cluster_spec.as_dict() if cluster_spec else {}


def _task_order(jobs) -> List[str]:
    """The order RunConfig numbers tasks in (``global_id_in_cluster``): the chief, the other
    jobs but parameter servers by name, the parameter servers last."""
    middle = sorted(job for job in jobs if job not in (CHIEF, PS))
    return ([CHIEF] if CHIEF in jobs else []) + middle + ([PS] if PS in jobs else [])


def _global_id(cluster_spec, task_type: Optional[str], task_id: int) -> int:
    if not task_type:
        return 0
    offset = 0
    for job in _task_order(cluster_spec.jobs):
        if job == task_type:
            return offset + task_id
        offset += len(cluster_spec.job_tasks(job))
    raise RuntimeError(f"task type {task_type!r} is not in the cluster {cluster_spec}")


def _adopt_worker_context(config, context) -> None:
    """A RunConfig copy set up for the task the coordinator runs in this thread."""
    # pylint: disable=protected-access
    config._service = None
    config._cluster_spec = context.cluster_spec
    config._task_type, config._task_id = context.task_type, context.task_id
    config._master = config._evaluation_master = context.master_target
    config._is_chief = context.is_chief
    if not config._cluster_spec:  # one local task
        config._global_id_in_cluster, config._num_ps_replicas, config._num_worker_replicas = 0, 0, 1
    elif config._task_type == EVALUATOR:  # the evaluator knows nothing of the training tasks
        config._cluster_spec = server_lib.ClusterSpec({})
        config._global_id_in_cluster, config._num_ps_replicas, config._num_worker_replicas = \
            None, 0, 0
    else:
        jobs = _jobs(config._cluster_spec)
        config._num_ps_replicas = len(jobs.get(PS, []))
        config._num_worker_replicas = len(jobs.get(WORKER, [])) + len(jobs.get(CHIEF, []))
        config._global_id_in_cluster = _global_id(config._cluster_spec, config._task_type,
                                                  config._task_id)
    log.info("Updated config: %s", vars(config))


def _take_experimental_strategies(config) -> None:
    """``DistributeConfig(train_distribute=..., eval_distribute=...)`` as the RunConfig's own."""
    # pylint: disable=protected-access
    experimental = config._experimental_distribute
    for field in ("train_distribute", "eval_distribute"):
        strategy = getattr(experimental, field, None) if experimental else None
        if strategy:
            if getattr(config, "_" + field):
                raise ValueError(f"Either `{field}` or `experimental_distribute.{field}` can be "
                                 f"set, not both.")
            setattr(config, "_" + field, strategy)


def init_run_config(config, tf_config: dict) -> None:
    """A RunConfig with a strategy: which coordinator mode it runs in, if any."""
    # pylint: disable=protected-access
    _take_experimental_strategies(config)
    cluster_spec = server_lib.ClusterSpec(tf_config.get("cluster", {}))
    config._init_distributed_setting_from_environment_var({})
    experimental = config._experimental_distribute
    remote_cluster = getattr(experimental, "remote_cluster", None) if experimental else None
    if config._train_distribute and remote_cluster:
        if cluster_spec:
            raise ValueError('Cannot set both "cluster_spec" of TF_CONFIG and '
                             '`experimental_distribute.remote_cluster`')
        config._distribute_coordinator_mode = STANDALONE_CLIENT
        config._cluster_spec = remote_cluster
        log.info("RunConfig initialized for Distribute Coordinator with STANDALONE_CLIENT mode")
        return
    if not cluster_spec or "master" in cluster_spec.jobs or not config._train_distribute:
        config._distribute_coordinator_mode = None  # local, a "master" job, or no strategy
        config._init_distributed_setting_from_environment_var(tf_config)
        config._maybe_overwrite_session_config_for_distributed_training()
        log.info("Not using Distribute Coordinator.")
        return
    # Each task runs the coordinator itself; its task comes from the coordinator's context.
    config._cluster_spec = cluster_spec
    config._distribute_coordinator_mode = INDEPENDENT_WORKER
    log.info("RunConfig initialized for Distribute Coordinator with INDEPENDENT_WORKER mode")


def should_run_distribute_coordinator(config) -> bool:
    """True when ``train_and_evaluate`` runs through the coordinator."""
    mode = getattr(config, "_distribute_coordinator_mode", None)
    if mode is None:
        log.info("Not using Distribute Coordinator.")
        return False
    if mode not in (STANDALONE_CLIENT, INDEPENDENT_WORKER):
        log.warning("Unexpected distribute_coordinator_mode: %r", mode)
        return False
    if not config.cluster_spec:
        log.warning("Running `train_and_evaluate` locally, ignoring "
                    "`experimental_distribute_coordinator_mode`.")
        return False
    return True


def _copy_for_task(estimator, field: str, strategy):
    """A deep copy of the estimator for the coordinator's task in this thread, set up for
    ``strategy`` (``field`` "train" or "eval"), that will not call the coordinator again."""
    # pylint: disable=protected-access
    local = copy.deepcopy(estimator)
    setattr(local._config, f"_{field}_distribute", strategy)
    _adopt_worker_context(local._config, coordinator_context.get_current_worker_context())
    setattr(local, f"_{field}_distribution", strategy)
    return local


def train_and_evaluate(estimator, train_spec, eval_spec, executor_cls) -> None:
    """``tf.estimator.train_and_evaluate`` through the coordinator: training tasks train, the
    evaluator task evaluates continuously with ``executor_cls``."""
    run_config = estimator.config
    mode = run_config._distribute_coordinator_mode  # pylint: disable=protected-access
    if not mode:
        raise ValueError("Distribute coordinator mode is not specified in `RunConfig`.")

    def train(strategy) -> None:
        local = _copy_for_task(estimator, "train", strategy)
        # In standalone-client mode only the chief's thread runs the program's hooks.
        every_task = mode == INDEPENDENT_WORKER
        hooks = list(train_spec.hooks) if every_task or local._config.is_chief else []  # pylint: disable=protected-access
        local._config._distribute_coordinator_mode = None  # pylint: disable=protected-access
        local.train(input_fn=train_spec.input_fn, max_steps=train_spec.max_steps, hooks=hooks)

    def evaluate(strategy) -> None:
        local = _copy_for_task(estimator, "eval", strategy)
        local._config._distribute_coordinator_mode = None  # pylint: disable=protected-access
        executor_cls(local, train_spec, eval_spec)._start_continuous_evaluation()  # pylint: disable=protected-access

    coordinator.run_distribute_coordinator(
        train, run_config.train_distribute, evaluate, run_config.eval_distribute, mode=mode,
        # In independent-worker mode each task reads the cluster from TF_CONFIG itself.
        cluster_spec=run_config.cluster_spec if mode == STANDALONE_CLIENT else None,
        session_config=run_config.session_config)


def _standalone_client(estimator, field: str, method: str, run: Callable, hooks):
    """``Estimator.train`` / ``evaluate`` (``method``) in standalone-client mode."""
    # pylint: disable=protected-access
    config = estimator._config
    strategy = getattr(config, f"_{field}_distribute")
    cluster_spec = multi_worker_util.normalize_cluster_spec(config.cluster_spec)
    if EVALUATOR in cluster_spec.jobs:
        raise ValueError("'evaluator' job is not supported if you don't use `train_and_evaluate`")
    if config._distribute_coordinator_mode != STANDALONE_CLIENT:
        raise ValueError(f"Only `STANDALONE_CLIENT` mode is supported when you call "
                         f"`Estimator.{method}`")
    if strategy.extended.experimental_between_graph:
        raise ValueError(f"`Estimator.{method}` API is not supported for "
                         f"{type(strategy).__name__} with `STANDALONE_CLIENT` mode.")

    def task(task_strategy):
        local = _copy_for_task(estimator, field, task_strategy)
        return run(local, task_strategy, hooks if local._config.is_chief else [])

    return coordinator.run_distribute_coordinator(
        task, strategy, mode=STANDALONE_CLIENT, cluster_spec=cluster_spec,
        session_config=config.session_config)


def estimator_train(estimator, train_distributed_fn, hooks):
    """``Estimator.train`` in standalone-client mode."""
    def train(local, strategy, chief_hooks):
        train_distributed_fn(local, strategy, chief_hooks)
        return local

    return _standalone_client(estimator, "train", "train", train, hooks)


def estimator_evaluate(estimator, evaluate_distributed_fn, hooks):
    """``Estimator.evaluate`` in standalone-client mode."""
    return _standalone_client(estimator, "eval", "evaluate", evaluate_distributed_fn, hooks)
