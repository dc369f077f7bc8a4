"""Graphcore's Keras pipeline stages: ``PipelineStage`` (which records the stage of each layer
call made inside it) and the pipeline stage assignment classes. Stages run in order on the
replica's device here: a stage records where IPUs would split the model, which sets the IPUs
per replica (so the replicas) and changes no number. ``ipu.keras`` re-exports them."""
from __future__ import annotations

import threading
from typing import Optional


_active = threading.local()  # the stage of the innermost ``with PipelineStage(n)`` (per thread)


def _record_stage(call):
    """Wrap ``Layer.__call__``: each call node made inside a PipelineStage gets its stage."""

    def wrapped(layer, *args, **kwargs):
        stage = getattr(_active, "stage", None)
        if stage is None:
            return call(layer, *args, **kwargs)
        before = len(layer._inbound_nodes)  # noqa: SLF001
        outputs = call(layer, *args, **kwargs)
        for node in layer._inbound_nodes[before:]:  # noqa: SLF001
            node._pipeline_stage = stage  # noqa: SLF001
        return outputs

    wrapped._records_stage = True  # noqa: SLF001
    return wrapped


class PipelineStage:
    """``with PipelineStage(n):`` around layer calls of a functional model puts those calls on
    pipeline stage ``n``."""

    def __init__(self, stage: int) -> None:
        if isinstance(stage, bool) or not isinstance(stage, int) or stage < 0:
            raise ValueError(f"PipelineStage needs a stage number >= 0, got {stage!r}.")
        self._stage = stage
        self._outer: Optional[int] = None

    def __enter__(self) -> "PipelineStage":
        from popdist_launcher.compat import keras2
        base_layer = keras2.import_src("engine.base_layer")
        if not getattr(base_layer.Layer.__call__, "_records_stage", False):
            base_layer.Layer.__call__ = _record_stage(base_layer.Layer.__call__)
        self._outer = getattr(_active, "stage", None)
        _active.stage = self._stage
        return self

    def __exit__(self, *exc) -> None:
        _active.stage = self._outer


class SequentialLayerPipelineStageAssignment:
    """The pipeline stage of one layer of a Sequential model."""

    def __init__(self, layer, pipeline_stage: Optional[int] = None) -> None:
        self.layer = layer
        self.pipeline_stage = pipeline_stage

    def __str__(self) -> str:
        return f"Layer: {self.layer.name} is on pipeline stage: {self.pipeline_stage}"


class ModelLayerPipelineStageAssignment(SequentialLayerPipelineStageAssignment):
    """The pipeline stage of one call (``node_index``) of a layer in a functional model."""

    def __init__(self, layer, node_index: int = 0, pipeline_stage: Optional[int] = None) -> None:
        super().__init__(layer, pipeline_stage)
        self.node_index = node_index


FunctionalLayerPipelineStageAssignment = ModelLayerPipelineStageAssignment
NestedModelPipelineStageAssignment = ModelLayerPipelineStageAssignment
FunctionalNestedModelPipelineStageAssignment = ModelLayerPipelineStageAssignment
SequentialNestedModelPipelineStageAssignment = SequentialLayerPipelineStageAssignment
