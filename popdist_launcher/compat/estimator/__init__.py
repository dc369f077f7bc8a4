"""``tf.estimator`` on TensorFlow 2.16+: tensorflow-estimator 2.15 made importable, as README's
"Estimators on TensorFlow 2.16+" says; nothing on 2.15. The module names (``tensorflow.estimator``,
the removed modules the estimator imports, this project's stand-ins for them) are entries of
the import table (popdist_launcher.compat.import_table) under its ``estimator-removed`` switch,
which ``install`` turns on. Standard library only at import time."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
import types
from typing import Tuple

log = logging.getLogger(__name__)

FIRST_WITHOUT_ESTIMATOR = (2, 16)
ESTIMATOR_API_NAME = "estimator"


def tensorflow_version(version: str) -> Tuple[int, int]:
    """``"2.21.0"`` -> ``(2, 21)``; an unreadable version counts as the newest."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else (sys.maxsize, 0)


def needed(version: str) -> bool:
    """True for a TensorFlow that no longer ships ``tf.estimator``'s support modules."""
    return tensorflow_version(version) >= FIRST_WITHOUT_ESTIMATOR


def install(tensorflow_module) -> None:
    """The site hook, once ``tensorflow`` has imported: everything above, on TensorFlow 2.16+
    with tensorflow-estimator installed. Without it there is no ``tf.estimator``, as on a plain
    TensorFlow 2.16+ (code that falls back when it is missing, such as Horovod's import, does)."""
    version = getattr(tensorflow_module, "__version__", "")
    if not needed(version) or importlib.util.find_spec("tensorflow_estimator") is None:
        return
    from popdist_launcher.compat.startup import switch_on
    switch_on("estimator-removed")  # the table's estimator names (a real module always wins)
    _register_api_name()
    _attach(tensorflow_module)
    log.debug("TensorFlow %s: tf.estimator is tensorflow-estimator's, with this project's "
              "stand-ins for the modules TensorFlow removed", version)


def _register_api_name() -> None:
    """``tf_export`` as tensorflow-estimator's ``estimator_export`` expects it: an ``estimator``
    API whose names are kept in their own attributes, apart from TensorFlow's and Keras's."""
    from tensorflow.python.util import tf_export

    if getattr(tf_export, "ESTIMATOR_API_NAME", None) is None:
        tf_export.ESTIMATOR_API_NAME = ESTIMATOR_API_NAME
    name = tf_export.ESTIMATOR_API_NAME
    attributes = type(next(iter(tf_export.API_ATTRS.values())))
    tf_export.API_ATTRS.setdefault(
        name, attributes("_estimator_api_names", "_estimator_api_constants"))
    tf_export.API_ATTRS_V1.setdefault(
        name, attributes("_estimator_api_names_v1", "_estimator_api_constants_v1"))


def _attach(tensorflow_module) -> None:
    compat = getattr(tensorflow_module, "compat", None)
    v1 = getattr(compat, "v1", None)
    v2 = getattr(compat, "v2", None)
    api = "tensorflow_estimator.python.estimator.api._{}.estimator"
    for owner, target in ((tensorflow_module, api.format("v2")), (v2, api.format("v2")),
                          (v1, api.format("v1"))):
        if owner is not None and "estimator" not in vars(owner):
            setattr(owner, "estimator", LazyEstimator(target, owner))


class LazyEstimator(types.ModuleType):
    """Stands in for an estimator API module until its first attribute is read: then imports it,
    puts it on its owner in its place and answers from it."""

    def __init__(self, target: str, owner) -> None:
        super().__init__(target)
        self._lazy_owner = owner

    def _lazy_load(self):
        module = importlib.import_module(self.__name__)
        owner = self.__dict__.get("_lazy_owner")
        if owner is not None and getattr(owner, "estimator", None) is self:
            setattr(owner, "estimator", module)
        self.__dict__.update(vars(module))  # references taken before the import keep working
        return module

    def __getattr__(self, name: str):
        if name.startswith("_lazy_"):
            raise AttributeError(name)
        return getattr(self._lazy_load(), name)

    def __dir__(self):
        return dir(self._lazy_load())


class TPUOnlyModule(types.ModuleType):
    """A removed TPU module: imports, and says what happened when TPUEstimator uses it. A class
    name (``tpu_embedding.AdagradParameters``, which the estimator imports and lists in a tuple
    for ``isinstance``) is a class that nothing is an instance of and that cannot be built."""

    def _removed(self, name: str) -> NotImplementedError:
        version = self.__dict__.get("_tf_version") or "2.16+"
        return NotImplementedError(
            f"{self.__name__}.{name} is not in TensorFlow {version} (removed in 2.16): "
            f"TPUEstimator's TPU embedding and worker-session support need TensorFlow 2.15; run "
            f"this program with the TensorFlow 2.15 stack.")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if not name[0].isupper() or name.isupper():
            raise self._removed(name)
        removed = self._removed(name)

        def refuse(*args, **kwargs):
            raise removed

        placeholder = type(name, (), {"__init__": refuse, "__module__": self.__name__})
        setattr(self, name, placeholder)
        return placeholder


def tpu_only_module(name: str) -> TPUOnlyModule:
    """The import table's ``make`` for the removed TPU modules."""
    module = TPUOnlyModule(name)
    module._tf_version = getattr(sys.modules.get("tensorflow"), "__version__", None)
    return module
