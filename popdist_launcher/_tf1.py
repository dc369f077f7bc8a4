"""``POPDIST_TF1=1`` (``poprun-lite --tf1``): TensorFlow starts with TensorFlow 1.15's behaviour.

That is what Graphcore's TF1 SDKs had and what their programs expect (``import
tensorflow.compat.v1 as tf`` with no ``disable_v2_behavior()``): graph mode, v1 control flow,
reference variables by default, v1 shapes and datasets. The site hook calls
``disable_v2_behavior`` below once TensorFlow has imported.
"""
import logging

log = logging.getLogger(__name__)


def disable_v2_behavior(tensorflow_module) -> None:
    """TensorFlow 1.15's defaults, as ``tf.compat.v1.disable_v2_behavior()`` sets them."""
    from tensorflow.python.compat import v2_compat
    from tensorflow.python.util import deprecation

    with deprecation.silence():  # TF 1.15 said nothing about its own defaults
        v2_compat.disable_v2_behavior()
    log.debug("POPDIST_TF1=1: TensorFlow %s runs with TensorFlow 1.x behaviour",
              getattr(tensorflow_module, "__version__", "?"))
