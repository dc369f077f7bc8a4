"""``ReplicatedMetricReductionMethod``: how Graphcore's Keras reports the metrics of several
replicas (``model.set_replication_options``). Its own module: ``ipu.keras`` re-exports it and
``model.set_replication_options`` (the Keras extensions' options) parses it."""
from __future__ import annotations

import enum

from popdist_launcher.ipu.gradient_accumulation import parse_member


class ReplicatedMetricReductionMethod(enum.Enum):
    """How Graphcore's Keras returns metrics of several replicas. Here Keras metrics of a
    replicated IPUStrategy always cover every replica's batches (what MEAN gives for mean
    metrics on an IPU system)."""
    NONE = 1
    LIST = 2
    SUM = 3
    MEAN = 4

    @classmethod
    def parse(cls, value) -> "ReplicatedMetricReductionMethod":
        return parse_member(cls, value)
