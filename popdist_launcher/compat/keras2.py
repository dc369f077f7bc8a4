"""Which Keras a program gets, decided in this one place: Keras 2 (``tf_keras`` on TensorFlow
2.16+, ``keras`` on 2.15) for programs written for it, TensorFlow's own Keras (Keras 3 on 2.16+)
for every other program, as stock TensorFlow gives it; and which package the IPU layer's reach-ins
into Keras 2's internals import (``src("engine.training")`` and the like).

On TensorFlow 2.16+ the start-up hook (popdist_launcher.compat.startup.choose_keras) calls
``choose`` as TensorFlow or ``keras`` begins to import, before TensorFlow reads
``TF_USE_LEGACY_KERAS``: the variable as the program's environment sets it wins; else a program
whose own source imports one of Graphcore's modules (an IPU program,
popdist_launcher.compat.ipu_program) or ``KERAS_2_APIS`` (Horovod's API, tf-keras, tf.estimator,
TensorFlow 1), or runs under ``poprun-lite --tf1``, gets ``TF_USE_LEGACY_KERAS=1``, and any other
program Keras 3. What needs Keras 2 in a Keras 3 program (Horovod's Keras modules, the IPU Keras
extensions) stops with one sentence naming the alternative. TensorFlow 2.15 (Keras 2 only, no
tf-keras) is left as it is. Standard library only at import time (the startup hook may load this
module).
"""
from __future__ import annotations

import functools
import importlib
import os

from popdist_launcher.wire import contract

LEGACY_KERAS_ENV = contract.LEGACY_KERAS
_ON = ("1", "true", "True")  # what TensorFlow reads as set
# Modules whose import in a program's own source makes it a Keras 2 program (besides Graphcore's):
# Horovod's TensorFlow and Keras APIs (Horovod 0.28 knows only Keras 2's variables and
# optimizers: its broadcast_variables fails on Keras 3's), tf-keras, the IPU layer under its own
# name, Keras 2's module paths of TensorFlow 2.6's time, and the APIs whose Keras parts exist only
# in Keras 2 (tf.estimator, whose canned estimators build on Keras 2's optimizers and layers, and
# TensorFlow 1's tensorflow.compat.v1 with its layers and Keras).
KERAS_2_APIS = ("horovod.tensorflow", "horovod.keras", "tf_keras", "popdist_launcher.ipu",
                "tensorflow.python.keras", "keras.optimizer_v2", "keras.engine",
                "tensorflow.estimator", "tensorflow_estimator", "tensorflow.compat.v1")

KERAS_3_MESSAGE = (
    "{what} needs Keras 2, but this program has Keras 3 (TensorFlow {tf}'s own Keras, {why}): "
    "{alternative}, or give the program Keras 2 with {env}=1 "
    "(poprun-lite -x {env}=1 ... or export {env}=1).")
KERAS_3_WHY_UNSET = ("given to every program whose own source uses no IPU module, Horovod's "
                     "API, tf_keras, tf.estimator or tensorflow.compat.v1")
HOROVOD_ALTERNATIVE = ("with Keras 3 use PopDistStrategy (its Keras fit and custom loops keep "
                       "the instances' weights equal) instead of Horovod's Keras module")
IPU_KERAS_ALTERNATIVE = ("the IPU Keras extensions (pipelining, gradient accumulation, ipu.keras, "
                         "the IPU Keras optimizers) exist for Keras 2 only; with Keras 3 train "
                         "with model.fit or a custom loop under the strategy without them")


class Keras3Error(ImportError):
    """Keras 2 is needed, and the program has Keras 3 on TensorFlow 2.16+."""


def keras_2_api(fullname: str) -> bool:
    """Whether importing ``fullname`` marks a program written for Keras 2: one of Graphcore's
    modules, Horovod's API or tf-keras."""
    from popdist_launcher.compat import import_table
    return import_table.graphcore_name(fullname) or any(
        fullname == name or fullname.startswith(name + ".") for name in KERAS_2_APIS)


@functools.lru_cache(maxsize=None)
def _program_keras_2_import():
    from popdist_launcher.compat import ipu_program
    return ipu_program.graphcore_import(matches=keras_2_api)


def choose(environ=os.environ) -> bool:
    """As TensorFlow or ``keras`` begins to import: whether this program gets Keras 2 from
    tf-keras (``TF_USE_LEGACY_KERAS`` as its environment sets it, else set to 1 here for a
    program whose own source imports a ``keras_2_api`` module); False on TensorFlow 2.15."""
    value = environ.get(LEGACY_KERAS_ENV)
    import importlib.util
    if importlib.util.find_spec("tf_keras") is None and _keras_is_2():
        # TensorFlow 2.15: tf.keras is Keras 2 already, and its loader breaks with the variable
        # set (it looks for tf-keras): whatever the user asked, this program gets that Keras 2.
        environ.pop(LEGACY_KERAS_ENV, None)
        return False
    if value is not None:
        return value in _ON
    if importlib.util.find_spec("tf_keras") is None:
        return False  # no tf-keras beside Keras 3
    if environ.get(contract.TF1) == "1":
        found = ("the program", "TensorFlow 1 (poprun-lite --tf1)")
    else:
        found = _program_keras_2_import()
    if found is None:
        return False
    import logging
    logging.getLogger(__name__).debug("%s imports %s: Keras 2 (tf-keras)", *found)
    environ[LEGACY_KERAS_ENV] = "1"
    return True


def _keras_is_2() -> bool:
    """Whether the installed ``keras`` distribution is Keras 2 (TensorFlow 2.15's), read from its
    metadata: nothing is imported."""
    import importlib.metadata
    try:
        return importlib.metadata.version("keras").startswith("2.")
    except importlib.metadata.PackageNotFoundError:
        return False


def instance_value():
    """What poprun-lite gives its instances as ``TF_USE_LEGACY_KERAS``: the launcher's own value
    (None where it has none: each program's start-up hook decides, ``choose``)."""
    return os.environ.get(LEGACY_KERAS_ENV)


def legacy_keras_requested(environ=os.environ) -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks TensorFlow 2.16+ for Keras 2 (tf-keras)."""
    return environ.get(LEGACY_KERAS_ENV) in _ON


def _tf_version() -> tuple:
    import tensorflow as tf
    return tuple(int(part) for part in tf.__version__.split(".")[:2])


@functools.lru_cache(maxsize=None)
def _package() -> str:
    if _tf_version() < (2, 16):
        return "keras"
    return "tf_keras"


def keras_3_active() -> bool:
    """Whether tf.keras is Keras 3 in this process
    (TensorFlow 2.16+ without TF_USE_LEGACY_KERAS)."""
    return _package() == "tf_keras" and not legacy_keras_requested()


def keras_3_message(what: str, alternative: str = IPU_KERAS_ALTERNATIVE) -> str:
    """The sentence that says ``what`` needs Keras 2, what to use instead, and how to get it."""
    import tensorflow as tf
    value = os.environ.get(LEGACY_KERAS_ENV)
    why = KERAS_3_WHY_UNSET if value is None else f"as {LEGACY_KERAS_ENV}={value} asks"
    return KERAS_3_MESSAGE.format(what=what, tf=tf.__version__, why=why,
                                  alternative=alternative, env=LEGACY_KERAS_ENV)


def require_keras_2(what: str, alternative: str = IPU_KERAS_ALTERNATIVE) -> None:
    """Raise ``Keras3Error`` (one sentence) when the program has Keras 3."""
    if keras_3_active():
        raise Keras3Error(keras_3_message(what, alternative))


def package(what: str = "the IPU layer's Keras support") -> str:
    """``keras`` or ``tf_keras``: the package that is Keras 2 here
    (``Keras3Error`` under Keras 3)."""
    require_keras_2(what)
    return _package()


def src(module: str = "", what: str = "the IPU layer's Keras support") -> str:
    """The full name of Keras 2's internal module ``module``
    ("engine.training", "optimizers.legacy")."""
    return f"{package(what)}.src" + (f".{module}" if module else "")


def import_src(module: str, what: str = "the IPU layer's Keras support"):
    """Import Keras 2's internal module ``module`` ("engine.data_adapter")."""
    return importlib.import_module(src(module, what))


def refuse_keras_3(module) -> None:
    """After-import hook of Horovod's Keras modules: ``Keras3Error`` under Keras 3 (a program
    whose source does not show the import, or one with TF_USE_LEGACY_KERAS=0)."""
    require_keras_2(module.__name__, HOROVOD_ALTERNATIVE)
