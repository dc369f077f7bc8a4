"""Progress reports the library makes by itself under poprun-lite (``report_progress``):
``tf.train.CheckpointManager.save`` reports the number of the checkpoint it wrote (and is a
long phase for the hang check while it runs, ``whereabouts.py``), Horovod's
elastic ``state.commit()`` the commits so far (``horovod_elastic.py``), the IPUEstimator its
global step (``ipu/ipu_estimator.py``); Keras' ``ModelCheckpoint`` and ``BackupAndRestore`` saves
are long phases too. Hooks of the import table (``import_table.py``, switch
``instance``) for programs that poprun-lite's wrapper started."""
from __future__ import annotations

import functools

from popdist_launcher.stack_dump import report_progress
from popdist_launcher.whereabouts import long_phase


def install_checkpoint_manager(module) -> None:
    """Hook on ``tensorflow.python.checkpoint.checkpoint_management``'s import."""
    manager = module.CheckpointManager
    if getattr(manager.save, "reports_progress", False):
        return
    save = manager.save

    @functools.wraps(save)
    def reporting_save(self, *args, **kwargs):
        with long_phase("checkpoint save"):  # a slow save is no hang (poprun-lite's check)
            path = save(self, *args, **kwargs)
        number = str(path or "").rsplit("-", 1)[-1]
        if number.isdigit():
            report_progress(int(number))
        return path

    reporting_save.reports_progress = True
    manager.save = reporting_save


# Keras' checkpointing callbacks -> the methods that write (Keras 2: tf_keras, or keras on
# TensorFlow 2.15; Keras 3 names BackupAndRestore's writer _save_model).
KERAS_SAVES = {"ModelCheckpoint": ("_save_model",), "BackupAndRestore": ("_backup", "_save_model")}


def install_keras_callbacks(module) -> None:
    """Hook on a Keras ``callbacks`` module's import: each checkpointing callback's save is a
    long phase for the hang check while it writes (a chief saving for a minute while the others
    wait at their next allreduce is not hung)."""
    for class_name, methods in KERAS_SAVES.items():
        callback = getattr(module, class_name, None)
        for method in methods:
            save = getattr(callback, method, None) if callback is not None else None
            if save is None or getattr(save, "long_phase", False):
                continue
            setattr(callback, method, _as_long_phase(save, f"Keras {class_name} save"))


def _as_long_phase(function, name: str):
    @functools.wraps(function)
    def marked(*args, **kwargs):
        with long_phase(name):
            return function(*args, **kwargs)

    marked.long_phase = True
    return marked
