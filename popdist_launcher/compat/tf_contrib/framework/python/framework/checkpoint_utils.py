"""``tensorflow.contrib.framework.python.framework.checkpoint_utils``: TensorFlow's own."""
from tensorflow.python.training.checkpoint_utils import (  # noqa: F401
    init_from_checkpoint, list_variables, load_checkpoint, load_variable)
