"""Progress reports the library makes by itself under poprun-lite (``report_progress``):
``tf.train.CheckpointManager.save`` reports the number of the checkpoint it wrote (and is a
long phase for the hang check while it runs, ``whereabouts.py``), Horovod's
elastic ``state.commit()`` the commits so far (``_horovod_elastic.py``), the IPUEstimator its
global step (``ipu/ipu_estimator.py``). A hook of the import table (``_import_table.py``,
switch ``progress-reports``) for programs that poprun-lite's wrapper started."""
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
