"""TensorFlow 1.15 / 2.6 names that Graphcore's applications use and TensorFlow 2.15 removed.
The modules are entries of the import table (popdist_launcher.compat.import_table), never shadowing
a module this TensorFlow has:

- ``tensorflow.python.distribute.distribution_strategy_context`` (get_strategy, has_strategy,
  get_replica_context, in_cross_replica_context ...) is ``distribute_lib``, which holds them now.
- ``tensorflow.pywrap_tensorflow`` (``NewCheckpointReader``) is ``py_checkpoint_reader``.
- ``tensorflow.contrib`` is ``popdist_launcher.compat.tf_contrib`` (the parts Graphcore's TF1
  applications use); ``tensorflow.tools.graph_transforms`` has no TensorFlow 2 module: it fails
  with one sentence that says what to use instead.

``install`` (a table hook, once TensorFlow has imported) adds the removed attributes:
``tf.compat.v1.NewCheckpointReader``; ``array_ops.stack`` and ``unstack`` (moved to
``array_ops_stack``, which Graphcore's tests and applications import them from
``array_ops``); ``distribute_lib.get_loss_reduction`` (moved to ``distribute_utils``);
``input_lib.DistributedDatasetInterface`` (moved to
``tensorflow.python.types.distribute``; TensorFlow's own old Keras copy, ``tensorflow.python.
keras``, still reads it there when it picks a data adapter).
"""


def install(tf_module=None) -> None:
    """Add the removed attributes (once)."""
    import tensorflow as tf
    from tensorflow.python.distribute import distribute_lib, distribute_utils, input_lib
    from tensorflow.python.ops import array_ops, array_ops_stack
    from tensorflow.python.training import py_checkpoint_reader
    from tensorflow.python.types import distribute as distribute_types
    if not hasattr(tf.compat.v1, "NewCheckpointReader"):
        tf.compat.v1.NewCheckpointReader = py_checkpoint_reader.NewCheckpointReader
    for name in ("stack", "unstack"):
        if not hasattr(array_ops, name):
            setattr(array_ops, name, getattr(array_ops_stack, name))
    if not hasattr(distribute_lib, "get_loss_reduction"):
        distribute_lib.get_loss_reduction = distribute_utils.get_loss_reduction
    if not hasattr(input_lib, "DistributedDatasetInterface"):
        input_lib.DistributedDatasetInterface = distribute_types.DistributedDatasetInterface
