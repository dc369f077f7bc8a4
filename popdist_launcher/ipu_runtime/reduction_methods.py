"""The IPU reduction methods the Keras extensions and Graphcore's names share: how accumulated
gradients are reduced before the update (``ipu.gradient_accumulation``) and how the metrics of
several replicas are reported (``ipu.replicated_metrics``, ``model.set_replication_options``)."""
from __future__ import annotations

import enum
from typing import Union


class GradientAccumulationReductionMethod(enum.Enum):
    """SUM: the update uses the sum of the micro-batches' gradients. MEAN: the sum divided by the
    number of micro-batches. RUNNING_MEAN: a running mean (``acc*n/(n+1) + g/(n+1)`` at the nth
    micro-batch), the same value as MEAN up to rounding."""
    SUM = 0
    MEAN = 1
    RUNNING_MEAN = 2

    @classmethod
    def parse(cls, value: Union["GradientAccumulationReductionMethod", str]
              ) -> "GradientAccumulationReductionMethod":
        return parse_member(cls, value)


def parse_member(cls, value):
    """``value`` as a member of the enum ``cls``: a member, or its name in any case (Graphcore's
    options take both); anything else is a ValueError listing the valid names."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str) and value.upper() in cls.__members__:
        return cls[value.upper()]
    raise ValueError(f"Cannot parse {value!r} as one of {cls.__name__}. "
                     f"Valid values are: {', '.join(cls.__members__)}.")


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
