"""TensorFlow 2.6 -> 2.15/2.21 bridges for IPU programs: the Keras modules that Graphcore's TF 2.6 programs
import and that moved (``keras.optimizer_v2``, ``keras.engine``, ``tensorflow.python.keras.datasets``
...), ``compile(steps_per_execution=<tensor>)``, which Graphcore's Keras accepted, and TF 2.6's
Keras optimizers (the ``OptimizerV2`` classes) under the public optimizer names.

The site hook calls ``install`` once TensorFlow or Keras (or the IPU layer) has imported, so
what a program gets does not depend on the order of its imports; these bridges only make work
what fails in stock Keras 2.15. An alias is made only for a module that does not
exist in this TensorFlow: it names the module that holds the same classes now (``keras.X`` ->
``K.src.X``, ``keras.optimizer_v2.X`` -> ``K.src.optimizers.legacy.X``,
``tensorflow.python.keras.X`` -> ``K.src.X``, where K is the package that is Keras 2 here:
``keras`` on TensorFlow 2.15, ``tf_keras`` on 2.16+, see popdist_launcher._keras2); every module
that imports keeps importing itself.
The optimizers follow a narrower trigger: ``use_tf26_optimizers`` runs when the program imports the IPU
layer by one of Graphcore's names (``tensorflow.python.ipu``, ``tensorflow.keras.ipu``, ``keras.ipu``),
so the project's own strategies, which use the IPU layer inside, keep Keras 2.15's optimizers; the
names the program's own modules bound before that import (``from tensorflow.keras.optimizers
import RMSprop``) are bound again to what the public names hold then (``rebind_program_names``).
Standard library only at import time (the site hook may load this module).
"""
import functools
import importlib
import importlib.util
import logging
import sys

from popdist_launcher import _keras2
from popdist_launcher._startup import SameModuleLoader

log = logging.getLogger(__name__)

# Old package prefix -> the modules (below Keras 2's ``src``) to try for what it holds now, first
# match wins.
_MOVED = (
    ("keras.optimizer_v2.learning_rate_schedule", ("optimizers.schedules.learning_rate_schedule",)),
    ("keras.optimizer_v2", ("optimizers.legacy",)),
    ("tensorflow.python.keras", ("",)),
    ("keras", ("",)),
)
_NEVER = ("keras.src", "keras.ipu", "keras.api")  # Keras 2's own, and the IPU alias's


def _moved_to(fullname: str):
    """The candidate new names of ``fullname`` (Keras 2.6 layout), or () when it is not Keras."""
    if any(fullname == p or fullname.startswith(p + ".") for p in _NEVER):
        return ()
    for old, new in _MOVED:
        new = tuple(_keras2.src(module) for module in new)
        if fullname == old or fullname.startswith(old + "."):
            return tuple(prefix + fullname[len(old):] for prefix in new)
    return ()


class MovedKerasFinder:
    """A meta path finder for the Keras modules of TensorFlow 2.6 that today's Keras 2 lacks."""

    def find_spec(self, fullname, path=None, target=None):
        if not (fullname.startswith("keras.") or fullname.startswith("tensorflow.python.keras")):
            return None
        candidates = _moved_to(fullname)
        if not candidates:
            return None
        parent, _, child = fullname.rpartition(".")
        parent_module = sys.modules.get(parent)
        # Inside a moved package; not in ``keras`` itself where that is tf_keras by another name
        # (popdist_launcher._startup), whose existing modules the finders after this one give.
        if parent_module is not None and parent_module.__name__ != parent and parent != "keras":
            candidates += (f"{parent_module.__name__}.{child}",)
        elif self._exists(fullname, path, target):
            return None  # never shadow a module this TensorFlow has
        for real in candidates:
            try:
                real_spec = importlib.util.find_spec(real)
            except ModuleNotFoundError:
                real_spec = None
            if real_spec is not None:
                log.debug("%s is %s in this Keras", fullname, real)
                return importlib.util.spec_from_loader(
                    fullname, SameModuleLoader(real),
                    is_package=real_spec.submodule_search_locations is not None)
        return None

    def _exists(self, fullname, path, target) -> bool:
        """Whether the finders after this one (the real ones) find ``fullname``."""
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            if type(finder).__name__ == "AfterImportFinder":  # finds nothing itself
                continue
            find = getattr(finder, "find_spec", None)
            if find is not None and find(fullname, path, target) is not None:
                return True
        return False


def steps_per_execution_value(value):
    """``steps_per_execution`` as Keras 2.15 takes it: a tensor, variable or NumPy integer with a
    known value becomes a Python int (Graphcore's Keras accepted them); anything else unchanged."""
    if value is None or isinstance(value, (int, str)):
        return value
    import numpy as np
    if isinstance(value, np.integer):
        return int(value)
    import tensorflow as tf
    if isinstance(value, (tf.Tensor, tf.Variable)):
        static = tf.get_static_value(value)
        if static is not None and np.ndim(static) == 0:
            return int(static)
    return value


def patch_compile(training_module) -> None:
    """Make ``Model.compile`` accept a tensor ``steps_per_execution`` (run on Keras's import)."""
    model_class = training_module.Model
    original = model_class.compile
    if getattr(original, "_ipu_steps_per_execution", False):
        return

    def compile(self, *args, **kwargs):  # noqa: A001 (Keras's name)
        if "steps_per_execution" in kwargs:
            kwargs["steps_per_execution"] = steps_per_execution_value(kwargs["steps_per_execution"])
        elif len(args) >= 7:  # optimizer, loss, metrics, loss_weights, weighted_metrics, run_eagerly
            args = args[:6] + (steps_per_execution_value(args[6]),) + args[7:]
        return original(self, *args, **kwargs)

    compile._ipu_steps_per_execution = True
    compile.__wrapped__ = original
    compile.__doc__ = original.__doc__
    model_class.compile = compile


def install(ipu_module=None) -> None:
    """Put the moved-module finder first on sys.meta_path and patch ``Model.compile`` once Keras
    has imported (once per process; the site hook runs it when the IPU layer imports). Nothing
    under Keras 3 (TF_USE_LEGACY_KERAS=0 on TensorFlow 2.16+): the IPU layer's Keras parts say so
    when they are used."""
    if _keras2.keras_3_active():
        log.debug("tf.keras is Keras 3: no TensorFlow 2.6 Keras bridges")
        return
    keras = _keras2.package()
    if not any(isinstance(f, MovedKerasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedKerasFinder())
    from popdist_launcher._startup import after_import
    after_import(f"{keras}.src.engine.training", "popdist_launcher._keras_compat:patch_compile")
    after_import(f"{keras}.losses", "popdist_launcher._keras_compat:add_losses_utils")


def add_losses_utils(losses_module) -> None:
    """``keras.losses.losses_utils`` (Keras 2.6's losses module imported it; Graphcore's programs
    use ``keras.losses.losses_utils.ReductionV2``) and ``keras.losses.LossFunctionWrapper``
    (public in Keras 2.6; Graphcore's BERT subclasses it)."""
    if not hasattr(losses_module, "losses_utils"):
        losses_module.losses_utils = _keras2.import_src("utils.losses_utils")
    if not hasattr(losses_module, "LossFunctionWrapper"):  # the base of the public losses
        wrapper = next((c for c in losses_module.MeanSquaredError.__mro__
                        if c.__name__ == "LossFunctionWrapper"), None)
        if wrapper is not None:
            losses_module.LossFunctionWrapper = wrapper


# TensorFlow 2.6's ``tf.keras.optimizers`` classes: Keras 2.11+ keeps them in ``optimizers.legacy``.
_TF26_OPTIMIZERS = {"Adadelta": "adadelta", "Adagrad": "adagrad", "Adam": "adam", "Adamax": "adamax",
                    "Ftrl": "ftrl", "Nadam": "nadam", "RMSprop": "rmsprop", "SGD": "gradient_descent",
                    "Optimizer": "optimizer_v2"}
# The public modules that hold those names (``tf.keras.optimizers``, ``keras.optimizers``), below
# the package that is Keras 2 here.
_OPTIMIZER_API = ("optimizers", "api._v2.keras.optimizers", "api._v1.keras.optimizers")


def use_tf26_optimizers(_module=None) -> None:
    """From now on the public Keras optimizer names, string names (``compile(optimizer="adam")``,
    ``optimizers.get``) and configs without ``is_legacy_optimizer: False`` give TF 2.6's
    ``OptimizerV2`` classes; modules not imported yet are patched when they import."""
    from popdist_launcher._startup import after_import
    if _keras2.keras_3_active():
        return  # Keras 3 has no OptimizerV2; the IPU layer's Keras parts say so when used
    keras = _keras2.package()
    after_import(f"{keras}.src.optimizers", "popdist_launcher._keras_compat:legacy_by_name")
    for name in ("tensorflow.keras.optimizers",) + tuple(f"{keras}.{m}" for m in _OPTIMIZER_API):
        after_import(name, "popdist_launcher._keras_compat:tf26_optimizer_names")
    rebind_program_names()  # what the program bound before this import


def legacy_by_name(optimizers_module) -> None:
    """Make Keras 2's ``src.optimizers.deserialize`` (which ``get`` calls) pick the legacy class for a
    name or a config that does not say it comes from a Keras 2.11+ optimizer."""
    original = optimizers_module.deserialize
    if getattr(original, "_tf26", False):
        return

    @functools.wraps(original)
    def deserialize(config, custom_objects=None, use_legacy_format=False, **kwargs):
        kwargs["use_legacy_optimizer"] = True  # a non-empty config's own flag still decides
        return original(config, custom_objects, use_legacy_format, **kwargs)

    deserialize._tf26 = True
    optimizers_module.deserialize = deserialize


def tf26_optimizer_names(api_module) -> None:
    """Point a public optimizers module's TF 2.6 names at the ``OptimizerV2`` classes."""
    optimizers_module = _keras2.import_src("optimizers")
    legacy_by_name(optimizers_module)
    for name, module in _TF26_OPTIMIZERS.items():
        legacy = _keras2.import_src(f"optimizers.legacy.{module}")
        tf26_class = getattr(legacy, "OptimizerV2" if name == "Optimizer" else name)
        current = getattr(api_module, name, None)
        if current is not None and current is not tf26_class:
            _REPLACED[id(current)] = (current, tf26_class)
        setattr(api_module, name, tf26_class)
    api_module.deserialize = optimizers_module.deserialize
    log.debug("%s: TensorFlow 2.6's OptimizerV2 classes", api_module.__name__)


# id(Keras 2.11+ class a public name held) -> (that class, the TF 2.6 class now at the name).
_REPLACED: dict = {}


def _program_files() -> dict:
    """The modules of the program itself (not the standard library, site-packages or this
    project) that have a Python source file: module name -> file."""
    import os
    import sysconfig
    skip = {os.path.realpath(sysconfig.get_paths()[key]) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
    found = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py") or not isinstance(getattr(module, "__dict__", None), dict):
            continue
        real = os.path.realpath(path)
        if any(real.startswith(prefix) for prefix in skip) or (
                real.startswith(own) and name.split(".")[0] in ("popdist_launcher", "popdist")):
            continue
        found[name] = real
    return found


def _optimizer_imports(path: str) -> list:
    """The (bound name, imported name) pairs of ``from <public Keras optimizers module> import X``
    at the top level of ``path`` (also inside ``if``/``try`` blocks)."""
    import ast
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    pairs = []
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            body.extend(node.body + node.orelse + getattr(node, "finalbody", [])
                        + [n for h in getattr(node, "handlers", []) for n in h.body])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module.endswith(".optimizers") or node.module == "keras.optimizers"):
            pairs.extend((alias.asname or alias.name, alias.name) for alias in node.names)
    return pairs


def rebind_program_names() -> None:
    """The names a program's modules bound with ``from tensorflow.keras.optimizers import Adam``
    (or ``keras.optimizers``, ``tf.optimizers``) before the IPU layer was imported: bound now to
    the class the public name holds, as when the IPU layer is imported first."""
    if not _REPLACED:
        return
    for name, path in _program_files().items():
        module = sys.modules.get(name)
        if module is None:
            continue
        for bound, imported in _optimizer_imports(path):
            value = module.__dict__.get(bound)
            replaced = _REPLACED.get(id(value))
            if replaced is not None and replaced[0] is value:
                module.__dict__[bound] = replaced[1]
                log.debug("%s.%s: TensorFlow 2.6's %s", name, bound, imported)
