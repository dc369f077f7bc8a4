"""Pipeline stages of a Keras model: the stage-assignment methods and the IPUs (shards) one
replica of the model spans.

Stages come from ``set_pipeline_stage_assignment`` or ``keras.ipu.PipelineStage``; they run in
order on the replica's device, so a pipelined model computes what the unpipelined one does.
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from popdist_launcher.ipu_runtime.keras.stages import (FunctionalLayerPipelineStageAssignment,
                                                       SequentialLayerPipelineStageAssignment)
from popdist_launcher.ipu_runtime.keras.options import (has_options, is_pipelined, options,
                                                        reset_train_function)


# ---- the methods added to tf.keras.Model ------------------------------------------------------
def set_pipeline_stage_assignment(self, pipeline_stage_assignment) -> None:
    """Assign layers to pipeline stages: stage numbers (one per layer) or the assignment objects
    ``get_pipeline_stage_assignment`` returns, with ``pipeline_stage`` set."""
    stages = [getattr(a, "pipeline_stage", a) for a in pipeline_stage_assignment]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stages):
        raise ValueError("pipeline stage assignments must be non-negative ints (or assignment "
                         "objects whose pipeline_stage is set).")
    options(self)["stages"] = stages
    reset_train_function(self)


def get_pipeline_stage_assignment(self):
    """One assignment per layer (per layer call of a functional model), with its stage (None
    until assigned)."""
    stages = options(self)["stages"] or []
    layers = [layer for layer in self.layers if not isinstance(layer, tf.keras.layers.InputLayer)]
    if isinstance(self, tf.keras.Sequential):
        make = SequentialLayerPipelineStageAssignment
        return [make(layer, stages[i] if i < len(stages) else None)
                for i, layer in enumerate(layers)]
    make = FunctionalLayerPipelineStageAssignment
    if not stages:  # the stages keras.ipu.PipelineStage gave the layers' calls
        stages = [getattr(layer._inbound_nodes[0], "_pipeline_stage", None)  # noqa: SLF001
                  if layer._inbound_nodes else None for layer in layers]  # noqa: SLF001
    return [make(layer, 0, stages[i] if i < len(stages) else None)
            for i, layer in enumerate(layers)]


def reset_pipeline_stage_assignment(self) -> None:
    options(self)["stages"] = None
    reset_train_function(self)


def print_pipeline_stage_assignment_summary(self, line_length=None, print_fn=None) -> None:
    (print_fn or print)(f"pipeline stage assignment of {self.name}: {options(self)['stages']}")


# ---- the IPUs one replica spans ---------------------------------------------------------------
def _node_stages(model) -> List[int]:
    """The stages ``keras.ipu.PipelineStage`` gave the calls of a functional model's layers."""
    if isinstance(model, tf.keras.Sequential) or not hasattr(model, "_network_nodes"):
        return []
    from popdist_launcher.compat import keras2
    functional = keras2.import_src("engine.functional")
    stages = []
    for layer in model.layers:
        for index, node in enumerate(layer._inbound_nodes):  # noqa: SLF001
            key = functional._make_node_key(layer.name, index)  # noqa: SLF001
            stage = getattr(node, "_pipeline_stage", None)
            if stage is not None and key in model._network_nodes:  # noqa: SLF001
                stages.append(stage)
    return stages


def shard_count(model) -> int:
    """The IPUs one replica of ``model`` spans, as Graphcore counts them: max(device_mapping)
    + 1 when ``set_pipelining_options`` gave one, else the last pipeline stage + 1 (from
    ``set_pipeline_stage_assignment`` or ``keras.ipu.PipelineStage``); 1 when not pipelined."""
    if not has_options(model) or not is_pipelined(model):
        return 1
    opts = options(model)
    if opts["device_mapping"]:
        return max(opts["device_mapping"]) + 1
    stages = opts["stages"] or _node_stages(model)
    return max(stages) + 1 if stages else 1
