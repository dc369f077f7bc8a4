"""``keras.ipu.extensions``: the classes holding the IPU methods of Keras models (Graphcore
registers them as extensions of Model, Sequential and functional models; here every
``tf.keras.Model`` gets the same methods, see ``popdist_launcher.ipu_runtime.keras_extensions``).

Its modules, which live in ``popdist_launcher.ipu_runtime.keras`` and import here too through
the import table: ``options`` (the ``set_*_options`` methods and the options they keep),
``pipeline_stages``, ``replicas`` (Graphcore's replica rule), ``data_adapter`` (each replica's
input), ``train_function`` (accumulating train function) and ``extensions_base`` (the methods
every model gets, fit / evaluate / predict included)."""
from __future__ import annotations

from popdist_launcher.ipu.keras import (FunctionalLayerPipelineStageAssignment,  # noqa: F401
                                        FunctionalNestedModelPipelineStageAssignment,
                                        ModelLayerPipelineStageAssignment,
                                        NestedModelPipelineStageAssignment, PipelineStage,
                                        SequentialLayerPipelineStageAssignment,
                                        SequentialNestedModelPipelineStageAssignment)
from popdist_launcher.ipu_runtime.keras.extensions_base import METHODS as _METHODS
from popdist_launcher.ipu_runtime.reduction_methods import ReplicatedMetricReductionMethod  # noqa: F401


class ModelExtension:
    """The IPU methods of a subclassed Keras Model (``set_gradient_accumulation_options``,
    ``set_pipelining_options`` ...), the same functions every Keras model gets here."""


for _method in _METHODS:  # the one list of the methods
    setattr(ModelExtension, _method.__name__, _method)


class FunctionalExtension(ModelExtension):
    """The IPU methods of a functional Keras model."""


class SequentialExtension(ModelExtension):
    """The IPU methods of a Sequential Keras model."""
