"""``keras.ipu.extensions``: the classes holding the IPU methods of Keras models (Graphcore
registers them as extensions of Model, Sequential and functional models; here every
``tf.keras.Model`` gets the same methods, see ``popdist_launcher.ipu.keras_extensions``)."""
from __future__ import annotations

from popdist_launcher.ipu import keras_extensions as _methods
from popdist_launcher.ipu.keras import (FunctionalLayerPipelineStageAssignment,  # noqa: F401
                                        FunctionalNestedModelPipelineStageAssignment,
                                        ModelLayerPipelineStageAssignment,
                                        NestedModelPipelineStageAssignment, PipelineStage,
                                        SequentialLayerPipelineStageAssignment,
                                        SequentialNestedModelPipelineStageAssignment)
from popdist_launcher.ipu.replicated_metrics import ReplicatedMetricReductionMethod  # noqa: F401


class ModelExtension:
    """The IPU methods of a subclassed Keras Model (``set_gradient_accumulation_options``,
    ``set_pipelining_options`` ...), the same functions every Keras model gets here."""


for _method in _methods._METHODS:  # noqa: SLF001 (the one list of the methods)
    setattr(ModelExtension, _method.__name__, _method)


class FunctionalExtension(ModelExtension):
    """The IPU methods of a functional Keras model."""


class SequentialExtension(ModelExtension):
    """The IPU methods of a Sequential Keras model."""
