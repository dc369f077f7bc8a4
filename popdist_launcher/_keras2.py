"""Which package holds Keras 2, chosen in this one place: ``keras`` on TensorFlow 2.15 (its own
Keras is 2.15) and ``tf_keras`` on TensorFlow 2.16+ (``keras`` is Keras 3 there; Keras 2 is the
tf-keras package, which ``TF_USE_LEGACY_KERAS=1`` makes ``tf.keras``). The IPU layer's reach-ins
into Keras's internals import ``src("engine.training")`` and the like.

The environment's startup hook (popdist_launcher._startup) sets ``TF_USE_LEGACY_KERAS=1`` for every
interpreter, and poprun-lite passes it to every instance, so programs written for Keras 2 keep it.
A program that sets it to 0 gets Keras 3, and whatever here needs Keras 2 stops with
``KERAS_3_MESSAGE``: Horovod and the IPU layer hook only Keras 2's optimizers, and with Keras 3
the ranks' weights would silently differ.
Standard library only at import time (the startup hook may load this module).
"""
from __future__ import annotations

import functools
import importlib
import os

from popdist_launcher import _contract

LEGACY_KERAS_ENV = _contract.LEGACY_KERAS
_ON = ("1", "true", "True")  # what TensorFlow reads as set

KERAS_3_MESSAGE = (
    "{what} needs Keras 2, but {env}={value} makes tf.keras Keras 3 in TensorFlow {tf}: Horovod and "
    "the IPU layer synchronise only Keras 2's optimizers (with Keras 3 the ranks' weights would "
    "silently differ); unset {env} (poprun-lite and this environment's startup hook set it to 1, "
    "for the tf-keras package) or run on TensorFlow 2.15.")


class Keras3Error(ImportError):
    """Keras 2 is needed, and the program chose Keras 3 on TensorFlow 2.16+."""


@functools.lru_cache(maxsize=None)
def instance_value():
    """What poprun-lite gives its instances as ``TF_USE_LEGACY_KERAS``: the launcher's own value,
    else "1" where tf-keras is installed (TensorFlow 2.16+), else nothing (TensorFlow 2.15, whose
    tf.keras breaks with the variable set and no tf-keras)."""
    value = os.environ.get(LEGACY_KERAS_ENV)
    if value is None:
        import importlib.util
        value = "1" if importlib.util.find_spec("tf_keras") is not None else None
    return value


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
    """Whether tf.keras is Keras 3 in this process (TensorFlow 2.16+ without TF_USE_LEGACY_KERAS)."""
    return _package() == "tf_keras" and not legacy_keras_requested()


def keras_3_message(what: str) -> str:
    """The sentence that says ``what`` needs Keras 2 and how to get it back."""
    import tensorflow as tf
    return KERAS_3_MESSAGE.format(what=what, env=LEGACY_KERAS_ENV,
                                  value=os.environ.get(LEGACY_KERAS_ENV, "(unset)"),
                                  tf=tf.__version__)


def require_keras_2(what: str) -> None:
    """Raise ``Keras3Error`` (one sentence) when the program chose Keras 3."""
    if keras_3_active():
        raise Keras3Error(keras_3_message(what))


def package(what: str = "the IPU layer's Keras support") -> str:
    """``keras`` or ``tf_keras``: the package that is Keras 2 here (``Keras3Error`` under Keras 3)."""
    require_keras_2(what)
    return _package()


def src(module: str = "", what: str = "the IPU layer's Keras support") -> str:
    """The full name of Keras 2's internal module ``module`` ("engine.training", "optimizers.legacy")."""
    return f"{package(what)}.src" + (f".{module}" if module else "")


def import_src(module: str, what: str = "the IPU layer's Keras support"):
    """Import Keras 2's internal module ``module`` ("engine.data_adapter")."""
    return importlib.import_module(src(module, what))


def refuse_keras_3(module) -> None:
    """After-import hook of Horovod's Keras modules: ``Keras3Error`` under Keras 3."""
    require_keras_2(module.__name__)
