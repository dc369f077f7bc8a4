"""The replicas a Keras model trains on under an IPU strategy, and how many of the strategy's
devices one replica spans, by Graphcore's rule (``replica_layout``).

Replicas are the selected IPUs over the IPUs of one pipeline; where the IPUs were made one
device each, a replica spans several devices. When TensorFlow made its devices before
``configure_ipu_system`` (so the IPUStrategy has one device where Graphcore's rule gives R
replicas), the R replicas run one after another on that device (``emulated_replicas``).
"""
from __future__ import annotations

import logging
import math
from typing import Optional, Tuple

import tensorflow as tf

from popdist_launcher import runtime
from popdist_launcher.ipu_runtime import configured_system
from popdist_launcher.ipu_runtime.keras.options import log_once
from popdist_launcher.ipu_runtime.keras.pipeline_stages import shard_count

log = logging.getLogger(__name__)


def replication_factor(model) -> int:
    """The replicas Graphcore's IPUStrategy trains ``model`` on: the selected IPUs over the
    model's shards rounded up to a power of two; the local replicas of PopDistStrategy /
    IPUHorovodStrategy; 1 otherwise. ValueError when the IPUs cannot hold the model or this
    IPUStrategy cannot run those replicas (see ``replica_span``)."""
    return replicas_and_span(model)[0]


def replica_span(model) -> int:
    """How many of the IPUStrategy's local replica devices one replica of ``model`` spans: 1,
    or the shards of a pipelined model when the IPUs were selected one device each (for
    example ``auto_select_ipus = 4`` and 2 stages: 2 replicas, each over 2 devices, its stages
    in order on the first)."""
    return replicas_and_span(model)[1]


def replica_layout(num_ipus: int, shards: int, local_replicas: int, ipus_per_replica: int = 1,
                   popdist_local_replicas: Optional[int] = None,
                   single_replica_reason: str = "") -> Tuple[int, int]:
    """``(replicas, span)`` by Graphcore's rule: a model over ``shards`` IPUs (rounded up to a
    power of two) on ``num_ipus`` selected IPUs makes ``num_ipus // shards`` replicas. ``span``
    is how many of an IPUStrategy's ``local_replicas`` devices one replica covers (more than 1
    when the IPUs were made one device each). ValueError, naming the fix, when the IPUs cannot
    hold the model, when PopDist runs another number of replicas, or when the devices cannot
    be grouped into those replicas."""
    rounded = 2 ** math.ceil(math.log2(shards))
    if shards > num_ipus:
        raise ValueError(f"Current device has {num_ipus} IPUs attached, however the current "
                         f"model requires a multiple of {rounded} IPUs.")
    replication = num_ipus // rounded
    if replication == local_replicas:
        return replication, 1
    if local_replicas == 1:
        raise ValueError(
            f"IPUConfig selects {num_ipus} IPU(s) for a model of {rounded} shard(s), so "
            f"Graphcore's IPUStrategy would train {replication} replicas; this one has a single "
            f"replica ({single_replica_reason or 'one IPU device'}). Configure the IPU system "
            f"before TensorFlow starts and use /device:IPU:0, or select {rounded} IPU(s) "
            f"(auto_select_ipus).")
    if popdist_local_replicas is not None and replication != popdist_local_replicas:
        raise ValueError(
            f"The model is pipelined over {rounded} IPUs, so the {num_ipus} IPU(s) that "
            f"popdist.tensorflow.set_ipu_config selected make {replication} replica(s), but this "
            f"instance runs {popdist_local_replicas}. Give each replica {rounded} IPUs: "
            f"poprun-lite --ipus-per-replica {rounded} (or POPDIST_NUM_IPUS_PER_REPLICA="
            f"{rounded}), or popdist.tensorflow.set_ipu_config(config, "
            f"ipus_per_replica={rounded}).")
    if ipus_per_replica == 1 and local_replicas % replication == 0:
        return replication, local_replicas // replication
    raise ValueError(
        f"This IPUStrategy has {local_replicas} local replica(s) of {ipus_per_replica} IPU(s), "
        f"but a model over {rounded} IPU(s) on {num_ipus} IPU(s) makes {replication} "
        f"replica(s), as Graphcore's counts them. Select a multiple of {rounded} IPUs "
        f"(auto_select_ipus) with --ipus-per-replica {rounded} or 1.")


def replicas_and_span(model) -> Tuple[int, int]:
    """``(replication_factor(model), replica_span(model))``."""
    system = configured_system.get_configured_system()
    strategy = model.distribute_strategy
    if not getattr(strategy, "_emulates_ipus", False):
        # PopDistStrategy / IPUHorovodStrategy: each local replica reads its own batches.
        return getattr(strategy.extended, "num_local_replicas", 1), 1
    if system is None:
        return 1, 1
    if strategy.num_local_replicas == 1 and not system.multi_replica_distribution:
        emulated = emulated_replicas(model)
        if emulated > 1:
            return emulated, 1
    popdist_local = (runtime.context().num_local_replicas
                     if system.multi_replica_distribution else None)
    return replica_layout(
        system.num_ipus, shard_count(model), strategy.num_local_replicas, system.ipus_per_replica,
        popdist_local,
        system.missing_devices or "IPUStrategy was given an ipu_device other than IPU:0")


def emulated_replicas(model) -> int:
    """The replicas Graphcore's rule gives a model under an IPUStrategy that has a single
    device (TensorFlow started before configure_ipu_system could make one device per
    replica): they run one after another on that device (1: no emulation)."""
    system = configured_system.get_configured_system()
    strategy = model.distribute_strategy
    if system is None or not getattr(strategy, "_emulates_ipus", False) or \
            strategy.num_local_replicas != 1 or system.multi_replica_distribution:
        return 1
    shards = shard_count(model)
    rounded = 2 ** math.ceil(math.log2(shards))
    if shards > system.num_ipus:
        raise ValueError(f"Current device has {system.num_ipus} IPUs attached, however the "
                         f"current model requires a multiple of {rounded} IPUs.")
    replicas = system.num_ipus // rounded
    if replicas > 1:
        log_once(log, "emulated", "IPUConfig selects %d IPUs for a model of %d shard(s): %d "
                 "replicas, as Graphcore's IPUStrategy trains; %s so they run one after "
                 "another on one device, each on its own batches, their gradients summed (a "
                 "layer that couples the samples of a batch, such as BatchNormalization, sees "
                 "each replica's batch in training and all replicas' batches at once in "
                 "evaluate/predict).", system.num_ipus, rounded, replicas,
                 system.missing_devices or "the strategy has a single device,")
    return replicas


def is_stage_device(span: int) -> bool:
    """In a replica context: whether this device replica is the first of its replica's
    ``span`` devices (the one that runs the stages; the others hold its other IPUs)."""
    replica_id = tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group)
    return span == 1 or replica_id % span == 0
