"""``keras.ipu`` / ``ipu.keras``: PipelineStage and the pipeline stage assignment classes of
Graphcore's Keras. Stages run in order on the replica's device here: a stage records where IPUs
would split the model, which sets the IPUs per replica (so the replicas) and changes no number."""
from popdist_launcher.ipu_runtime.keras.stages import (  # noqa: F401
    FunctionalLayerPipelineStageAssignment, FunctionalNestedModelPipelineStageAssignment,
    ModelLayerPipelineStageAssignment, NestedModelPipelineStageAssignment, PipelineStage,
    SequentialLayerPipelineStageAssignment, SequentialNestedModelPipelineStageAssignment)
from popdist_launcher.ipu_runtime.reduction_methods import ReplicatedMetricReductionMethod  # noqa: F401

__ipu__built__ = "1"
