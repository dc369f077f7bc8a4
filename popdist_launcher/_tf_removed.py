"""Module names of TensorFlow 1.15 / 2.6 that Graphcore's applications import and TensorFlow 2.15
removed: each imports as the module that holds the same functions now, or fails with one
sentence that says what to use instead (the site hook calls ``install`` once TensorFlow has
imported; a module this TensorFlow has is never shadowed). Standard library only at import.

- ``tensorflow.python.distribute.distribution_strategy_context`` (get_strategy, has_strategy,
  get_replica_context, in_cross_replica_context ...) is ``distribute_lib``, which holds them now.
- ``tensorflow.pywrap_tensorflow`` (``NewCheckpointReader``) is ``py_checkpoint_reader``; also
  ``tf.compat.v1.NewCheckpointReader``.
- ``tensorflow.contrib`` and ``tensorflow.tools.graph_transforms`` have no TensorFlow 2 module.
"""
import importlib
import importlib.util
import sys

from popdist_launcher._startup import SameModuleLoader

_ALIASES = {
    "tensorflow.python.distribute.distribution_strategy_context":
        "tensorflow.python.distribute.distribute_lib",
    "tensorflow.pywrap_tensorflow": "tensorflow.python.training.py_checkpoint_reader",
}
_GONE = {
    "tensorflow.contrib": (
        "tensorflow.contrib was removed in TensorFlow 2 and is not provided here: use its "
        "TensorFlow 2.15 replacement (tf.compat.v1.layers, tf.keras, tf.train's checkpoint "
        "functions, tf.xla.experimental.compile for contrib.compiler.xla)."),
    "tensorflow.tools.graph_transforms": (
        "tensorflow.tools.graph_transforms (TransformGraph) was removed in TensorFlow 2 and is "
        "not provided here: export the model without the graph transforms (they only optimise "
        "an inference graph) or use tf.compat.v1.graph_util to freeze it."),
}


class RemovedTensorFlowFinder:
    """A meta path finder for the removed TensorFlow module names above."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("tensorflow."):
            return None
        target_name = _ALIASES.get(fullname)
        if target_name is not None:
            return importlib.util.spec_from_loader(fullname, SameModuleLoader(target_name),
                                                   is_package=False)
        for gone, sentence in _GONE.items():
            if fullname == gone or fullname.startswith(gone + "."):
                raise ModuleNotFoundError(sentence, name=fullname)
        return None


def install(tf_module=None) -> None:
    """Put the finder on sys.meta_path and add the removed attributes (once)."""
    if not any(isinstance(f, RemovedTensorFlowFinder) for f in sys.meta_path):
        sys.meta_path.append(RemovedTensorFlowFinder())  # after the real finders: never shadows
    import tensorflow as tf
    from tensorflow.python.training import py_checkpoint_reader
    if not hasattr(tf.compat.v1, "NewCheckpointReader"):
        tf.compat.v1.NewCheckpointReader = py_checkpoint_reader.NewCheckpointReader
