"""``tensorflow.python.keras`` is the Keras 2 that tf.keras is, in IPU programs, as on Graphcore's
SDKs (where TensorFlow's Keras lived there and the IPU Keras extensions attach to it): each
``tensorflow.python.keras.X`` the program imports is ``{keras2}.src.X``, the same module
object, or the module TensorFlow 2.6's ``X`` moved to (``keras_moves.MOVED``, also named as an
attribute of its old parent's Keras 2 module), so objects from both names mix.

TensorFlow 2.15+ still ships an old Keras copy of its own under that name, imported with
TensorFlow. ``forget_tensorflows_copy`` runs once TensorFlow has imported in an IPU program
with Keras 2: it takes that copy's modules out of ``sys.modules`` (TensorFlow keeps its own
references), so the program's next import of each name goes through the import table's
entries (popdist_launcher.compat.import_table), module by module. A module of the copy that Keras 2
has no counterpart for stays TensorFlow's. Standard library only at import.
"""
import sys

from popdist_launcher.compat.keras_moves import MOVED, PACKAGE



def keras_2_name(name: str, keras_2: str):
    """The module of ``keras_2`` (``tf_keras`` or ``keras``) that TensorFlow 2.6's ``name``
    (``tensorflow.python.keras[.X]``) is."""
    rest = name[len(PACKAGE):].lstrip(".")
    for old in sorted(MOVED, key=len, reverse=True):
        if rest == old or rest.startswith(old + "."):
            rest = MOVED[old] + rest[len(old):]
            break
    return f"{keras_2}.src" + (f".{rest}" if rest else "")


def forget_tensorflows_copy(_tensorflow=None) -> None:
    """Take TensorFlow's own ``tensorflow.python.keras`` modules that Keras 2 has out of
    ``sys.modules`` (and the package off ``tensorflow.python``), so the program's imports of
    those names answer Keras 2's modules."""
    import importlib.util

    from popdist_launcher.compat import keras2
    keras_2 = keras2.package()
    names = [n for n in list(sys.modules) if n == PACKAGE or n.startswith(PACKAGE + ".")]
    for name in names:
        module = sys.modules.get(name)
        if getattr(module, "__name__", name) != name:
            continue  # already answered as Keras 2's
        try:
            found = importlib.util.find_spec(keras_2_name(name, keras_2))
        except (ImportError, ValueError):
            found = None
        if found is not None:
            del sys.modules[name]
    python = sys.modules.get("tensorflow.python")
    if PACKAGE not in sys.modules and getattr(python, "keras", None) is not None:
        del python.keras
    _name_moved_modules(keras_2)


def _name_moved_modules(keras_2: str) -> None:
    """Each moved module also as an attribute of its old parent's Keras 2 module
    (``from tensorflow.python.keras.layers import merge`` looks ``merge`` up in
    ``{keras2}.src.layers``)."""
    import importlib
    for old in MOVED:
        parent_name, _, leaf = f"{PACKAGE}.{old}".rpartition(".")
        try:
            parent = importlib.import_module(keras_2_name(parent_name, keras_2))
            if not hasattr(parent, leaf):
                setattr(parent, leaf, importlib.import_module(
                    keras_2_name(f"{PACKAGE}.{old}", keras_2)))
        except ImportError:
            continue
