"""``tensorflow.contrib.framework``: its checkpoint functions (``list_variables``,
``load_variable``, ``load_checkpoint``, ``init_from_checkpoint``), TensorFlow's own."""
from tensorflow.python.training.checkpoint_utils import (  # noqa: F401
    init_from_checkpoint, list_variables, load_checkpoint, load_variable)
