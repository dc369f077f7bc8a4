"""Horovod elastic workers started by poprun-lite: ``TensorFlowKerasState.sync`` (and so
``KerasState``'s) has every rank's optimizer create its variables before the broadcast, so a
worker that joins a running job broadcasts the same variables as the ranks that trained
(horovod#2652: it broadcast none and waited in the next collective, the others in this one)."""
from __future__ import annotations

import functools
import logging

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
        return sync(self)

    building_sync.builds_optimizer = True
    return building_sync


def build_optimizer(optimizer, variables) -> None:
    """Create ``optimizer``'s variables for ``variables`` (its step counter, hyperparameters and
    slots), as its first ``apply_gradients`` does, without changing any value; nothing when they
    exist. Keras 2's optimizers: the legacy ``OptimizerV2`` and the newer ``Optimizer``."""
    if hasattr(optimizer, "_create_all_weights"):  # legacy: creates only what is missing
        before = len(optimizer.variables())
        optimizer._create_all_weights(variables)
    elif hasattr(optimizer, "build") and not (getattr(optimizer, "_built", False)
                                              or getattr(optimizer, "built", False)):
        before = len(optimizer.variables())  # a property there, a list that can be called
        optimizer.build(variables)
    else:
        return
    created = len(optimizer.variables()) - before
    if created:
        log.info("state sync: created %d variable(s) of the optimizer %s before the broadcast",
                 created, type(optimizer).__name__)
