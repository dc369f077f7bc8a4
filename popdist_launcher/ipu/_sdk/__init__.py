"""``tensorflow.compiler.plugin``: the SDK's internal modules that IPU programs import
(``poplar.ops.gen_*_ops``, ``poplar.driver.*_pb2``). Each imports; what has a CPU meaning works,
anything else raises one sentence when it is used."""
from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Callable, Dict, Iterable

GRAPHCORE_PREFIX = "tensorflow.compiler.plugin"


def graphcore_name(module_name: str) -> str:
    """The name a program imported ``module_name`` under."""
    return GRAPHCORE_PREFIX + module_name[len(__name__):]


def unavailable(what: str, instead: str) -> NotImplementedError:
    """The error for an IPU-only part of the SDK used on a CPU."""
    return NotImplementedError(f"{what} is an IPU-only part of Graphcore's SDK with no meaning "
                               f"on a CPU; {instead}.")


def add_modules(package: str, names: Iterable[str],
                make_getattr: Callable[[str], Callable[[str], object]],
                implemented: Dict[str, Dict[str, object]]) -> None:
    """Make ``package.<name>`` importable for each name: a module holding ``implemented[name]``
    whose other attributes come from ``make_getattr(<its Graphcore name>)``."""
    parent = sys.modules[package]
    for name in names:
        full = f"{package}.{name}"
        module = types.ModuleType(full, f"Graphcore's {graphcore_name(full)} on a CPU.")
        module.__spec__ = importlib.machinery.ModuleSpec(full, None)
        module.__dict__.update(implemented.get(name, {}))
        module.__getattr__ = make_getattr(graphcore_name(full))
        sys.modules[full] = module
        setattr(parent, name, module)
