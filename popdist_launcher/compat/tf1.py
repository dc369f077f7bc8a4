"""``POPDIST_TF1=1`` (``poprun-lite --tf1``): TensorFlow starts with TensorFlow 1.15's behaviour.

That is what Graphcore's TF1 SDKs had and what their programs expect (``import
tensorflow.compat.v1 as tf`` with no ``disable_v2_behavior()``): graph mode, v1 control flow,
reference variables by default, v1 shapes and datasets, and TF 1.15's names on ``import tensorflow
as tf`` (``tf.Session``, ``tf.placeholder``, ``tf.train.Saver``). The site hook calls
``disable_v2_behavior`` below once TensorFlow has imported.
"""
import logging
import types

log = logging.getLogger(__name__)


def disable_v2_behavior(tensorflow_module) -> None:
    """TensorFlow 1.15's defaults, as ``tf.compat.v1.disable_v2_behavior()`` sets them."""
    from tensorflow.python.compat import v2_compat
    from tensorflow.python.util import deprecation

    with deprecation.silence():  # TF 1.15 said nothing about its own defaults
        v2_compat.disable_v2_behavior()
        added = add_v1_names(tensorflow_module, tensorflow_module.compat.v1)
    log.debug("POPDIST_TF1=1: TensorFlow %s runs with TensorFlow 1.x behaviour (%d v1 names "
              "added)", getattr(tensorflow_module, "__version__", "?"), added)


# Namespaces that are not TensorFlow 1's API (the other API versions, lazily loaded packages).
_NOT_MERGED = frozenset({"compat", "keras", "estimator", "raw_ops", "lite", "mlir"})
# TensorFlow 2's top-level namespaces that are Keras's (tf.keras.initializers ...); TF 1.15's are
# TensorFlow's own (tf.initializers.random_uniform(dtype=...), tf.losses.softmax_cross_entropy),
# and a TF1 program reaches Keras's through tf.keras.
_V1_REPLACES = frozenset({"initializers", "losses", "metrics"})
# ... and TensorFlow 2's initializer classes, whose constructors lost TF 1.15's ``dtype``
# (tf.random_uniform_initializer(minval, maxval, dtype=...)); TF 1.15's also serve v2-style calls.
_V1_REPLACES_SUFFIX = "_initializer"


def add_v1_names(namespace, v1_namespace, _seen=None) -> int:
    """Give ``namespace`` (``tensorflow`` or one of its modules) every public name of TF 1.15's
    API (``v1_namespace``, its ``tf.compat.v1`` counterpart) that it lacks, and do the same for
    the modules both have (``tf.train.Saver``, ``tf.summary.FileWriter``). A name both have keeps
    TensorFlow 2's meaning (packages that ``import tensorflow as tf`` keep working), except the
    top-level namespaces that TensorFlow 2 took from Keras (``tf.initializers``, ``tf.losses``,
    ``tf.metrics``) and the top-level initializer classes (``tf.zeros_initializer``), which are
    TF 1.15's. Returns how many names were added."""
    if _seen is None:
        for name in dir(v1_namespace):
            if name in _V1_REPLACES or (name.endswith(_V1_REPLACES_SUFFIX)
                                        and not name.startswith("_")):
                setattr(namespace, name, getattr(v1_namespace, name))
    seen = set() if _seen is None else _seen
    if id(v1_namespace) in seen:
        return 0
    seen.add(id(v1_namespace))
    present = set(dir(namespace))
    added = 0
    for name in dir(v1_namespace):
        if name.startswith("_") or name in _NOT_MERGED:
            continue
        if name not in present:
            try:
                setattr(namespace, name, getattr(v1_namespace, name))
            except (AttributeError, ImportError):  # a lazily loaded name whose package is absent
                continue
            added += 1
            continue
        ours, theirs = getattr(namespace, name, None), getattr(v1_namespace, name, None)
        if (isinstance(ours, types.ModuleType) and isinstance(theirs, types.ModuleType)
                and ours is not theirs):
            added += add_v1_names(ours, theirs, seen)
    return added
