"""``keras.ipu`` / ``ipu.keras``: PipelineStage and the pipeline stage assignment classes of
Graphcore's Keras. Stages run in order on the replica's device here, so a stage assignment
records where IPUs would split the model and changes no number."""
from __future__ import annotations

from typing import Optional

from popdist_launcher.ipu.keras_extensions import ReplicatedMetricReductionMethod  # noqa: F401


class PipelineStage:
    """``with PipelineStage(n):`` around layer calls of a functional model marks them as stage
    ``n``."""

    def __init__(self, stage: int) -> None:
        if isinstance(stage, bool) or not isinstance(stage, int) or stage < 0:
            raise ValueError(f"PipelineStage needs a stage number >= 0, got {stage!r}.")
        self._stage = stage

    def __enter__(self) -> "PipelineStage":
        return self

    def __exit__(self, *exc) -> None:
        return None


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
