"""Run at every interpreter start by ``popdist_launcher.pth`` in site-packages: makes
``tensorflow.python.ipu[.X]`` import as ``popdist_launcher.ipu[.X]`` (the same module objects),
so IPU programs run unedited. Standard library only; nothing is imported until a program
imports an IPU module. POPDIST_LAUNCHER_IPU_ALIAS=0 turns the alias off.
"""
import os
import sys

ALIAS_ENV = "POPDIST_LAUNCHER_IPU_ALIAS"
ALIASED = "tensorflow.python.ipu"
TARGET = "popdist_launcher.ipu"
# Graphcore's Keras module (``from tensorflow.keras import ipu``; ``keras.ipu.PipelineStage``).
KERAS_ALIASES = ("keras.ipu", "tensorflow.keras.ipu", "keras.api._v2.keras.ipu")
KERAS_TARGET = "popdist_launcher.ipu.keras"


class _AliasLoader:
    """Loads an aliased name as the already importable module it stands for."""

    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec):
        import importlib
        return importlib.import_module(self._target)

    def exec_module(self, module) -> None:
        pass  # the target module ran when it was imported under its own name


class IPUAliasFinder:
    """A meta path finder for ``tensorflow.python.ipu`` and its submodules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in KERAS_ALIASES:
            real = KERAS_TARGET
        elif fullname == ALIASED or fullname.startswith(ALIASED + "."):
            real = TARGET + fullname[len(ALIASED):]
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


def install_ipu_alias() -> None:
    """Put the alias finder first on sys.meta_path (once)."""
    if not any(isinstance(f, IPUAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, IPUAliasFinder())


if os.environ.get(ALIAS_ENV, "1") != "0":
    install_ipu_alias()
if "POPRUN_STACK_FD" in os.environ:  # started by poprun-lite's wrapper: stacks on request
    from popdist_launcher.stack_dump import register_from_environ
    register_from_environ()
