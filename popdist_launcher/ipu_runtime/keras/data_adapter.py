"""Keras input under replicas: each replica's batches (a dataset grouped per step, or spread over
the devices of a replica), counted per replica, with Graphcore's checks and warnings.

Each replica reads its own batches (consecutive batches go to replicas 0, 1, ...); the steps
of an epoch (and a given ``steps_per_epoch`` / ``steps``) are divided by the replication
factor, the remainder dropped with a warning. Arrays are read in batches of ``batch_size``
(Keras's default of 32 when none is given), as Graphcore's IPU data handler reads them.
"""
from __future__ import annotations

import logging
from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu_runtime.keras.options import log_once
from popdist_launcher.ipu_runtime.keras.replicas import emulated_replicas, replicas_and_span

log = logging.getLogger(__name__)


def emulated_input(model, x, y, sample_weight, batch_size, steps):
    """``(x, y, sample_weight, batch_size, steps, replicas)`` for replicas run one after another
    on one device (``emulated_replicas``): each step reads the next batch of every replica,
    concatenated (datasets: ``replicas`` elements; arrays: ``batch_size x replicas`` rows, the
    rows that fill no such step dropped with a warning); ``steps`` counts per-replica steps."""
    replicas = emulated_replicas(model)
    if replicas == 1:
        return x, y, sample_weight, batch_size, steps, 1
    total = num_batches(x, batch_size, steps)
    if total is None:
        raise ValueError(f"Could not infer the size of the data for {replicas} replicas. You "
                         f"must specify the number of steps to run.")
    _check_batches_per_replica(total, replicas)
    if isinstance(x, tf.data.Dataset):
        return (spread(x, replicas, 1), y, sample_weight, batch_size,
                None if steps is None else steps // replicas, replicas)
    batch_size = array_batch_size(x, batch_size, steps)
    rows = total // replicas * replicas * batch_size
    return (_first_rows(x, rows), _first_rows(y, rows), _first_rows(sample_weight, rows),
            batch_size * replicas, None if steps is None else steps // replicas, replicas)


def _first_rows(data, rows: int):
    """``data`` (arrays, nested or None) cut to its first ``rows`` rows."""
    return tf.nest.map_structure(lambda a: a[:rows] if hasattr(a, "shape") else a, data)


def _check_batches_per_replica(total: int, replicas: int) -> None:
    """Graphcore's error when some replica would get no batch, and its warning when the last
    ``total % replicas`` batches are dropped."""
    if total < replicas:
        raise ValueError(f"The provided dataset contains {total} batches, but all {replicas} "
                         f"replicas need at least one each.")
    if total % replicas:
        log.warning("Dataset of %d batches is being evenly distributed between %d replicas. The "
                    "remaining %d batch(es) will be dropped.", total, replicas, total % replicas)


def _num_rows(x) -> Optional[int]:
    """The rows of array input ``x`` (arrays, a list / tuple / dict of them); None otherwise."""
    if x is None or isinstance(x, tf.data.Dataset):
        return None
    flat = tf.nest.flatten(x)
    if not flat or not hasattr(flat[0], "shape") or not getattr(flat[0], "shape", ()):
        return None
    return int(flat[0].shape[0])


def array_batch_size(x, batch_size, steps) -> Optional[int]:
    """The batch Keras reads arrays ``x`` in: ``batch_size``, else the rows over ``steps``
    (rounded up), else Keras's default of 32."""
    if batch_size:
        return batch_size
    rows = _num_rows(x)
    if steps and rows is not None:
        return -(-rows // steps)
    return 32


def num_batches(x, batch_size, steps) -> Optional[int]:
    """The batches ``x`` gives per epoch (``steps`` when given); None when unknown."""
    if steps is not None:
        return steps
    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality())
        return cardinality if cardinality >= 0 else None
    rows = _num_rows(x)
    return None if rows is None else -(-rows // (batch_size or 32))


def replica_input(model, x, y, sample_weight, batch_size, steps, what: str):
    """``(x, y, sample_weight, batch_size, steps, grouped, replicas)`` for Keras under a
    replicated IPUStrategy, with Graphcore's steps per replica: the dataset's batches (or
    ``steps``) over the replicas, the remainder dropped with a warning. A dataset is grouped
    here (R elements per step, so Keras counts steps per replica); arrays are read in batches
    of ``batch_size`` (Keras's 32 when none is given), one batch per replica per step, cut to
    the rows of whole steps. Unchanged without replication."""
    replicas, span = replicas_and_span(model)
    if replicas * span == 1 or emulated_replicas(model) > 1:
        return x, y, sample_weight, batch_size, steps, False, 1
    is_dataset = isinstance(x, tf.data.Dataset)
    if not is_dataset and _num_rows(x) is not None:
        batch_size = array_batch_size(x, batch_size, steps)
    total = num_batches(x, batch_size, steps)
    if total is None:
        raise ValueError(f"Could not infer the size of the data for {what}() over {replicas} "
                         f"replicas. You must specify the number of steps to run.")
    rows = _num_rows(x)
    if rows is not None and rows % batch_size:
        raise ValueError(
            f"The provided set of data has a partial batch, which could result in data being "
            f"dropped. Either adjust the `batch_size` of your model (currently set to "
            f"{batch_size}) or pad your dataset to ensure there are no partial batches.")
    _check_batches_per_replica(total, replicas)
    log_once(log, "replicated_metrics", "%d local replicas: each replica reads its own "
             "batches (the effective batch size is the dataset's batch x %d); Keras metrics "
             "and losses are over every replica's batches.", replicas, replicas)
    if is_dataset:
        extended = model.distribute_strategy.extended
        grouped = extended.replica_elements(x) if span == 1 else spread(x, replicas, span)
        return (grouped, y, sample_weight, batch_size,
                None if steps is None else steps // replicas, True, replicas)
    if rows is not None:
        cut = total // replicas * replicas * batch_size
        x, y, sample_weight = (_first_rows(x, cut), _first_rows(y, cut),
                               _first_rows(sample_weight, cut))
    return x, y, sample_weight, batch_size, total // replicas, False, replicas


def spread(dataset: "tf.data.Dataset", replicas: int, span: int) -> "tf.data.Dataset":
    """``replica_elements`` for replicas over ``span`` devices each: each element of the result
    holds the next ``replicas`` elements, each ``span`` times in a row, concatenated on the batch
    axis, so that the devices of one replica read the same batch."""

    def concat(t):
        t = tf.repeat(t, span, axis=0)
        if t.shape[1:].is_fully_defined():  # static shapes let TensorFlow split it evenly
            return tf.reshape(t, [replicas * span * t.shape[1], *t.shape[2:]])
        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))

    def group(*element):
        out = tf.nest.map_structure(concat, element)
        return out if len(element) > 1 else out[0]

    return dataset.batch(replicas, drop_remainder=True).map(group)
