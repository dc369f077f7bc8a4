"""Run at every interpreter start by ``popdist_launcher.pth`` in site-packages: makes
``tensorflow.python.ipu[.X]`` import as ``popdist_launcher.ipu[.X]`` (the same module objects)
and the SDK's internal ``tensorflow.compiler.plugin[.X]`` as ``popdist_launcher.ipu._sdk[.X]``,
so IPU programs run unedited (importing the IPU layer by Graphcore's names also gives TensorFlow
2.6's Keras optimizers, also to the names the program bound before, see
popdist_launcher._keras_compat), and runs the hooks registered with
``after_import`` right after a module (TensorFlow, the estimator's RunConfig ...) first finishes
importing. Standard library only; nothing is imported until a program imports one of those
modules.
It also keeps Keras 2 for every program of the environment on TensorFlow 2.16+: where tf-keras is
installed, it sets ``TF_USE_LEGACY_KERAS=1`` unless the program's environment sets it, as
TensorFlow or ``keras`` begins to import (``tf.keras`` is then the tf-keras package, Keras 2), and
``import keras`` then gives that same Keras 2 (``keras.X`` is ``tf_keras.X``), as TensorFlow 2.6's
programs expect; TensorFlow 2.15 (no tf-keras; the variable set would break its ``tf.keras``) is
left as it is. See popdist_launcher._keras2.
With ``TF_USE_LEGACY_KERAS=0`` (Keras 3), Horovod's Keras modules stop with one sentence.
POPDIST_LAUNCHER_IPU_ALIAS=0 turns the alias off. POPDIST_TF1=1 and POPRUN_TF_CONFIG_AUTO=1
(names of popdist_launcher._contract, spelled out here to import nothing) register hooks.
"""
import os
import sys

ALIAS_ENV = "POPDIST_LAUNCHER_IPU_ALIAS"
ALIASED = "tensorflow.python.ipu"
TARGET = "popdist_launcher.ipu"
# Graphcore's Keras module (``from tensorflow.keras import ipu``; ``keras.ipu.PipelineStage``).
# ``tf_keras.ipu``: ``from keras import ipu`` where ``keras`` is tf-keras by another name (the
# import system looks the submodule up by the module's own name).
KERAS_ALIASES = ("keras.ipu", "tensorflow.keras.ipu", "keras.api._v2.keras.ipu", "tf_keras.ipu",
                 "tf_keras.api._v2.keras.ipu")
KERAS_TARGET = "popdist_launcher.ipu.keras"
# The SDK's internal modules (``from tensorflow.compiler.plugin.poplar.ops import gen_ipu_ops``).
SDK_ALIASED = "tensorflow.compiler.plugin"
SDK_TARGET = "popdist_launcher.ipu._sdk"
# Keras 2 (popdist_launcher._keras2.LEGACY_KERAS_ENV, spelled out here to import nothing).
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
KERAS_2_PACKAGE = "tf_keras"  # Keras 2 on TensorFlow 2.16+, where ``keras`` is Keras 3


class _AliasLoader:
    """Loads an aliased name as the already importable module it stands for."""

    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec):
        import importlib
        module = importlib.import_module(self._target)
        _graphcore_name_imported()
        return module

    def exec_module(self, module) -> None:
        pass  # the target module ran when it was imported under its own name


class IPUAliasFinder:
    """A meta path finder for ``tensorflow.python.ipu``, Graphcore's Keras ``ipu`` modules,
    ``tensorflow.compiler.plugin`` and their submodules."""

    def find_spec(self, fullname, path=None, target=None):
        keras_alias = next((a for a in KERAS_ALIASES if fullname == a or fullname.startswith(a + ".")), None)
        if keras_alias is not None:  # keras.ipu.optimizers is popdist_launcher.ipu.keras.optimizers
            real = KERAS_TARGET + fullname[len(keras_alias):]
        elif fullname == ALIASED or fullname.startswith(ALIASED + "."):
            real = TARGET + fullname[len(ALIASED):]
        elif fullname == SDK_ALIASED or fullname.startswith(SDK_ALIASED + "."):
            real = SDK_TARGET + fullname[len(SDK_ALIASED):]
        else:
            return None
        import importlib.util
        try:
            real_spec = importlib.util.find_spec(real)
            if real_spec is None and real.count(".") == 2:  # ipu.nn_ops is ipu.ops.nn_ops
                real = TARGET + ".ops" + real[len(TARGET):]
                real_spec = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            return None
        if real_spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(real),
            is_package=real_spec.submodule_search_locations is not None)


class SameModuleLoader:
    """Loads a name as another name's module and leaves that module's own spec in place (the
    one loader for every alias the site hook and the compatibility modules make)."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec = None

    def create_module(self, spec):
        import importlib
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set the alias's spec: keep the real one


def legacy_keras_wanted() -> bool:
    """Whether tf.keras is to be Keras 2 from tf-keras: ``TF_USE_LEGACY_KERAS`` as the environment
    sets it, else (set to 1 now) wherever tf-keras is installed."""
    value = os.environ.get(LEGACY_KERAS_ENV)
    if value is None:
        import importlib.util
        if importlib.util.find_spec(KERAS_2_PACKAGE) is None:
            return False
        os.environ[LEGACY_KERAS_ENV] = value = "1"
    return value in ("1", "true", "True")


class Keras2Finder:
    """A meta path finder that finds nothing for ``tensorflow`` but decides ``TF_USE_LEGACY_KERAS``
    before TensorFlow reads it, and makes ``import keras`` (and ``keras.X``) Keras 2 where tf.keras
    is Keras 2 from the tf-keras package: the same module objects as ``tf_keras`` (``tf_keras.X``).
    On TensorFlow 2.15 (no tf-keras installed) and under Keras 3 ``keras`` is the installed
    package."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "tensorflow":
            legacy_keras_wanted()
            return None
        if fullname == "keras":
            if not legacy_keras_wanted():
                return None
        elif fullname.startswith("keras."):
            keras = sys.modules.get("keras")
            if keras is None or keras.__name__ != KERAS_2_PACKAGE:
                return None  # keras is the installed package (Keras 2.15, or Keras 3)
        else:
            return None
        import importlib.util
        real = KERAS_2_PACKAGE + fullname[len("keras"):]
        try:
            real_spec = importlib.util.find_spec(real)
        except (ModuleNotFoundError, ValueError):
            return None
        if real_spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, SameModuleLoader(real),
            is_package=real_spec.submodule_search_locations is not None)


class AfterImportFinder:
    """A meta path finder that finds nothing itself: for a module with hooks registered, it
    asks the finders after it for the real spec and makes that module's loader run the hooks
    once its code has run (the module is complete in ``sys.modules`` by then)."""

    def __init__(self) -> None:
        self.hooks: dict = {}  # module name -> ["package.module:function", ...]

    def find_spec(self, fullname, path=None, target=None):
        # The hooks stay registered until the module's code has run: ``find_spec`` is also
        # called only to ask whether a module exists (importlib.util.find_spec).
        if not self.hooks.get(fullname):
            return None
        spec = None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec  # a namespace package or an old-style loader: no hook
        real_exec = loader.exec_module

        def exec_module(module):
            real_exec(module)
            try:
                del loader.exec_module  # one module per loader: back to the class's method
            except AttributeError:
                pass
            _run_hooks(self.hooks.pop(fullname, ()), module)

        loader.exec_module = exec_module
        return spec


_TF26_OPTIMIZERS = []  # [True] once a Graphcore name of the IPU layer has been imported


def _graphcore_name_imported() -> None:
    """The program imports the IPU layer by Graphcore's name: TF 2.6's Keras optimizers (once)."""
    if not _TF26_OPTIMIZERS:
        _TF26_OPTIMIZERS.append(True)
        _run_hooks(["popdist_launcher._keras_compat:use_tf26_optimizers"], None)


def _run_hooks(hooks, module) -> None:
    import importlib
    for hook in hooks:
        module_name, _, function = hook.partition(":")
        getattr(importlib.import_module(module_name), function)(module)


def after_import(module_name: str, hook: str) -> None:
    """Run ``hook`` ("package.module:function", called with the module) once ``module_name``
    has been imported; at once when it already has been."""
    if module_name in sys.modules:
        _run_hooks([hook], sys.modules[module_name])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, AfterImportFinder)), None)
    if finder is None:
        finder = AfterImportFinder()
        sys.meta_path.insert(0, finder)
    finder.hooks.setdefault(module_name, []).append(hook)


def install_ipu_alias() -> None:
    """Put the alias finder first on sys.meta_path (once)."""
    if not any(isinstance(f, IPUAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, IPUAliasFinder())


def install_keras_2() -> None:
    """Keras 2 unless the environment chose otherwise: the finder that sets
    ``TF_USE_LEGACY_KERAS=1`` and gives ``keras`` as ``tf_keras`` (once); Horovod's Keras modules
    refuse Keras 3."""
    if not any(isinstance(f, Keras2Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Keras2Finder())
    for module in ("horovod.tensorflow.keras", "horovod.keras"):
        after_import(module, "popdist_launcher._keras2:refuse_keras_3")


install_keras_2()
if os.environ.get(ALIAS_ENV, "1") != "0":
    install_ipu_alias()
# TF 2.6's Keras module names, losses_utils and compile(steps_per_execution=<tensor>) from the
# moment TensorFlow or Keras imports, so that what a program gets does not depend on whether
# it imports them before or after the IPU layer (they only make what fails in stock Keras work).
after_import("tensorflow", "popdist_launcher._keras_compat:install")
after_import("keras", "popdist_launcher._keras_compat:install")
after_import("popdist_launcher.ipu.config", "popdist_launcher._keras_compat:install")
# tf.data's statistics and settings that TF 1.15 / 2.6 had and TF 2.15 removed.
after_import("tensorflow", "popdist_launcher._tf_data_compat:install")
after_import("tensorflow", "popdist_launcher._tf_removed:install")  # moved and removed modules
after_import("popdist_launcher.ipu.config", "popdist_launcher.ipu._ipu_devices:watch")  # IPU:N
after_import("tensorflow", "popdist_launcher._estimator_compat:install")  # tf.estimator on TF 2.16+
# Hooks on first import, each only where its variable asks for it (see popdist_launcher._contract).
if os.environ.get("POPDIST_TF1") == "1":  # poprun-lite --tf1: TensorFlow 1.15's behaviour
    after_import("tensorflow", "popdist_launcher._tf1:disable_v2_behavior")
if os.environ.get("POPRUN_TF_CONFIG_AUTO") == "1":  # --tf-config auto: RunConfig sees a cluster
    after_import("tensorflow_estimator.python.estimator.run_config",  # only with a strategy
                 "popdist_launcher._run_config:install")
if os.environ.get("HOROVOD_ELASTIC") == "1" and "POPRUN_JOB_ID" in os.environ:  # Horovod mode
    after_import("horovod.tensorflow.elastic", "popdist_launcher._horovod_elastic:install")
if "POPRUN_STACK_FD" in os.environ:  # started by poprun-lite's wrapper: stacks on request
    after_import("tensorflow.python.checkpoint.checkpoint_management",  # progress reports
                 "popdist_launcher._progress_hooks:install_checkpoint_manager")
    from popdist_launcher.stack_dump import register_from_environ
    register_from_environ()
