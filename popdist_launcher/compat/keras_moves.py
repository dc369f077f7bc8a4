"""Where TensorFlow 2.6's Keras modules (``tensorflow.python.keras.X``) are in today's Keras 2
(``{keras2}.src``): data only, read by the import table at every interpreter start and by
``tf_python_keras``, which answers those names in IPU programs."""

PACKAGE = "tensorflow.python.keras"

# TensorFlow 2.6's module below tensorflow.python.keras -> where Keras 2.15's ``src`` has it
MOVED = {
    "optimizer_v2": "optimizers.legacy",
    "optimizer_v2.learning_rate_schedule": "optimizers.schedules.learning_rate_schedule",
    "optimizer_v2.legacy_learning_rate_decay": "optimizers.legacy_learning_rate_decay",
    "optimizer_v2.utils": "optimizers.utils",
    "optimizer_v1": "optimizers.optimizer_v1",
    "initializers.initializers_v2": "initializers.initializers",
    "layers.advanced_activations": "layers.activation",
    "layers.merge": "layers.merging",
    "layers.embeddings": "layers.core.embedding",
    "layers.recurrent": "layers.rnn",
    "layers.recurrent_v2": "layers.rnn",
    "layers.convolutional_recurrent": "layers.rnn",
    "layers.dense_attention": "layers.attention",
    "layers.legacy_rnn": "layers.rnn",
    "layers.legacy_rnn.rnn_cell_impl": "layers.rnn.legacy_cells",
    "layers.legacy_rnn.rnn_cell_wrapper_impl": "layers.rnn.legacy_cell_wrappers",
    "saving.hdf5_format": "saving.legacy.hdf5_format",
    "saving.model_config": "saving.legacy.model_config",
    "saving.save": "saving.legacy.save",
    "saving.saved_model": "saving.legacy.saved_model",
    "saving.saving_utils": "saving.legacy.saving_utils",
}
