"""Horovod elastic workers started by poprun-lite: ``TensorFlowKerasState.sync`` (and so
``KerasState``'s) is the same collectives on every rank. A worker that joins a running job
(horovod#2652) has an optimizer without variables: they are created first, then the model's and
the optimizer's variables are broadcast one by one under names of their position, which do not
depend on where each rank created them."""
from __future__ import annotations

import functools
import logging

from popdist_launcher.compat import horovod_seams

log = logging.getLogger(__name__)


def install(module) -> None:
    """Hook on ``horovod.tensorflow.elastic``'s import: its Keras state builds before it syncs."""
    state = module.TensorFlowKerasState
    if not getattr(state.sync, "builds_optimizer", False):
        state.sync = _building(state.sync)


def _building(sync):
    @functools.wraps(sync)
    def building_sync(self):
        import tensorflow as tf

        # In graph mode the broadcast op was made at construction: the same on every rank.
        if tf.executing_eagerly() and self.optimizer is not None:
            build_optimizer(self.optimizer, self.model.trainable_variables)
            horovod_seams.set_model_broadcast(
                self, functools.partial(broadcast_state, self.model, self.optimizer))
        return sync(self)

    building_sync.builds_optimizer = True
    return building_sync


def build_optimizer(optimizer, variables) -> None:
    """Create ``optimizer``'s variables for ``variables`` (its step counter, hyperparameters and
    slots), as its first ``apply_gradients`` does, without changing any value; nothing when they
    exist. Keras 2's optimizers: the legacy ``OptimizerV2`` and the newer ``Optimizer``."""
    before = len(optimizer.variables())  # a method, or a property whose list can be called
    if hasattr(optimizer, "_create_all_weights"):  # legacy: creates only what is missing
        optimizer._create_all_weights(variables)
    elif hasattr(optimizer, "build") and not (getattr(optimizer, "_built", False)
                                              or getattr(optimizer, "built", False)):
        optimizer.build(variables)
    created = len(optimizer.variables()) - before
    if created:
        log.info("state sync: created %d variable(s) of the optimizer %s before the broadcast",
                 created, type(optimizer).__name__)


def broadcast_state(model, optimizer) -> None:
    """Rank 0's model and optimizer variables to every rank, in order. The names of Horovod's
    broadcasts are the variables' positions: an optimizer's variables are named after the name
    scope they were created in (``Adam/m/...`` in an eager step, ``m/...`` inside ``fit``), and
    Horovod pairs collectives by name. A rank with other counts than rank 0 raises."""
    import horovod.tensorflow as hvd

    counts = (len(model.variables), len(optimizer.variables()))
    root = hvd.broadcast_object(counts, root_rank=0, name="PoprunStateSyncCounts")
    if tuple(root) != counts:
        raise ValueError(
            f"elastic state sync: rank {hvd.rank()} has {counts[0]} model and {counts[1]} "
            f"optimizer variable(s), rank 0 has {root[0]} and {root[1]}; build the same model "
            f"and optimizer on every worker")
    for kind, variables in (("model", model.variables), ("optimizer", optimizer.variables())):
        for index, var in enumerate(variables):
            var.assign(hvd.broadcast(var, root_rank=0, name=f"PoprunStateSync_{kind}_{index}"))
