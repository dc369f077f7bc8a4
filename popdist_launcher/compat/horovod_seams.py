"""Every private name of Horovod's that the worker side touches (the compatibility layer's hooks
on ``horovod.tensorflow.elastic``), one small function each: a Horovod release that changes one
fails in tests/test_horovod_seams.py, not in a worker at run time. The driver helper's are in
``launcher/elastic/helper/horovod_seams.py``.

Standard library only at import: the hooks load this module as Horovod's elastic module imports.
"""
from __future__ import annotations

from typing import Callable, Tuple

# TensorFlowKerasState (horovod/tensorflow/elastic.py) sets this in __init__ and its ``sync``
# calls it: the broadcast of the model's and the optimizer's variables from rank 0.
MODEL_BROADCAST = "_bcast_model"
# horovod.common.elastic.State.commit's body, statement by statement: the replacement below runs
# the same two calls with the launcher's progress report between them.
COMMIT_BODY: Tuple[str, ...] = ("self.save()", "self.check_host_updates()")


def set_model_broadcast(state, broadcast: Callable[[], None]) -> None:
    """The broadcast ``state.sync()`` runs (a TensorFlowKerasState's), replaced by ours."""
    setattr(state, MODEL_BROADCAST, broadcast)


def commit_with(between: Callable[[], None]) -> Callable:
    """Horovod's ``State.commit`` (save, then look for host changes: ``COMMIT_BODY``) with
    ``between()`` run between the two, as a method to put on ``State``."""

    def commit(self) -> None:
        self.save()
        between()
        self.check_host_updates()

    commit.__doc__ = "Horovod's State.commit (save, check host updates), reporting in between."
    return commit
