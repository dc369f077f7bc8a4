"""popdist_launcher: run IPU-style distributed TensorFlow programs on ordinary CPUs and GPUs.

Importing the package is cheap: the runtime accessors load on first use, and TensorFlow and
Horovod only with the submodules that need them (strategies, collectives, ipu). The launcher
imports this package on every job's start-up, so keep it that way.
"""
__version__ = "0.1.0"

_RUNTIME_NAMES = (
    "LaunchEnvironmentError",
    "RuntimeContext",
    "context",
    "init",
    "instance_index",
    "is_launched",
    "local_instance_index",
    "num_instances",
    "num_ipus_per_replica",
    "num_local_replicas",
    "num_total_replicas",
    "replica_index_offset",
    "restart_count",
)


def set_ipu_config(config, ipus_per_replica=None, configure_device=True):
    """Fill an IPUConfig's multi-replica distribution options from the launch environment."""
    from popdist_launcher.ipu_runtime.config import set_ipu_config as _set

    return _set(config, ipus_per_replica=ipus_per_replica, configure_device=configure_device)


def report_progress(step):
    """Tell poprun-lite that training advanced to ``step`` (a global step, an epoch or a
    checkpoint number: any number that grows with the training state). Elastic jobs count a
    failure towards --host-failure-limit only when no report above the job's highest so far
    came since the host's previous failure, and --hang-timeout's default bound follows the
    interval between reports. Cheap (one pipe write); does nothing outside poprun-lite. The
    IPUEstimator, ``tf.train.CheckpointManager.save`` and Horovod's elastic ``state.commit()``
    report by themselves under poprun-lite."""
    from popdist_launcher.stack_dump import report_progress as _report

    _report(step)


def long_phase(name):
    """A context manager that marks a long phase of this instance (a Python-side evaluation,
    a slow export): while it runs, poprun-lite's hang check calls no instance of the job hung,
    though its peers wait in their next collective. Does nothing outside poprun-lite.
    ``with popdist_launcher.long_phase("evaluation"): ...``"""
    from popdist_launcher.whereabouts import long_phase as _long_phase

    return _long_phase(name)


def __getattr__(name):
    if name in _RUNTIME_NAMES:
        import importlib  # here, not at the top: the package is imported at every interpreter start
        return getattr(importlib.import_module("popdist_launcher.runtime"), name)
    raise AttributeError(f"module 'popdist_launcher' has no attribute {name!r}")


__all__ = [*_RUNTIME_NAMES, "long_phase", "report_progress", "set_ipu_config"]
