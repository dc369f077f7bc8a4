"""``tensorflow.contrib`` as Graphcore's TensorFlow 1.15 SDKs had it, for the parts Graphcore's TF1
applications use: ``layers``' initializers, ``compiler.xla.compile``, ``data.AUTOTUNE``,
``framework``'s ``checkpoint_utils`` and ``rnn``'s cells. Anything else of contrib fails with one
sentence (AttributeError here; the import table's ModuleNotFoundError for a module).

``install`` (a table hook under ``--tf1``) makes it ``tf.contrib`` and ``tf.compat.v1.contrib``.
"""
import importlib

PROVIDED = ("compiler", "data", "framework", "layers", "rnn")


def __getattr__(name: str):
    if name in PROVIDED:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(
        f"tensorflow.contrib.{name} was removed in TensorFlow 2 and is not provided here "
        f"(provided: contrib.{', contrib.'.join(PROVIDED)}): use its TensorFlow 2 replacement "
        f"(tf.compat.v1.layers, tf.keras, tf.train).")


def __dir__():
    return sorted(set(globals()) | set(PROVIDED))


def install(tf_module=None) -> None:
    """``tf.contrib`` and ``tf.compat.v1.contrib`` (TensorFlow 1.15 had both), once."""
    import tensorflow as tf
    contrib = importlib.import_module("tensorflow.contrib")
    for namespace in (tf, tf.compat.v1):
        if "contrib" not in namespace.__dict__:
            setattr(namespace, "contrib", contrib)
