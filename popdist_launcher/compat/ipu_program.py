"""Whether the running program is an IPU program, decided when NumPy or TensorFlow imports
(``popdist_launcher.compat.startup.decide_ipu_program`` asks ``graphcore_import``), before the
program can bind any NumPy or Keras name: its own source names one of Graphcore's
modules (the import table's ``graphcore`` entries: ``tensorflow.python.ipu``,
``tensorflow.keras.ipu``, ``keras.ipu``, ``tensorflow.compiler.plugin``), in the main file (or
the ``-c`` command), in a module of its own on the stack of that import (the program a runner
imports: a test file under pytest, a module behind a console script) or in a module of its own
that those import, followed through their imports, wherever the import statement sits (top
level, a function, ``importlib.import_module("...")`` with a literal name). Then the table's
``ipu-program`` switch is on from the start, so the program gets TensorFlow 2.6's Keras
optimizers under every name it binds, whatever the order of its imports, and NumPy's 1.x names
(popdist_launcher.compat.numpy1_names); the same reading decides its Keras
(popdist_launcher.compat.keras2.choose).

A program's own module is one outside the standard library, site-packages and this project;
nothing is imported to find it. A program whose Graphcore import is not in its own source (a
name built at run time, a package installed in site-packages, an interactive session) turns the
switch on at that import instead (popdist_launcher.compat.startup.SameModuleLoader).
"""
from __future__ import annotations

import os
import sys

from popdist_launcher.compat import import_table

MAX_MODULES = 1000  # a bound on the modules read, for programs inside very large trees
NOT_THE_PROGRAM = ("popdist_launcher", "popdist")


def main_source():
    """(module name, package, file or None, source or None) of the running program's main
    module, or None where there is none to read (an interactive session)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path:
        spec = getattr(main, "__spec__", None)
        name = spec.name if spec is not None else "__main__"
        return name, getattr(main, "__package__", None) or "", path, None
    argv = getattr(sys, "orig_argv", [])
    if "-c" in argv[:-1]:
        return "__main__", "", None, argv[argv.index("-c") + 1]
    return None


def importing_modules(locate) -> list:
    """(module name, package, file, None) of each of the program's own modules on the stack of
    the import now running, innermost first: where a runner whose main module is not the
    program's own (pytest, a console script in site-packages) imports it, the program's module
    is there."""
    found = []
    frame = sys._getframe(1)
    while frame is not None:
        path, name = frame.f_code.co_filename, frame.f_globals.get("__name__")
        if name and path.endswith(".py") and os.path.isfile(path) and locate.own(path):
            package = frame.f_globals.get("__package__")
            found.append((name, name.rpartition(".")[0] if package is None else package, path,
                          None))
        frame = frame.f_back
    return found


def graphcore_import(main=None, matches=import_table.graphcore_name):
    """(module, the Graphcore name it imports) for the first of the program's modules that
    imports one of Graphcore's modules (a name ``matches`` accepts), or None. Without ``main``:
    the running program's main module and its own modules on the importing stack."""
    locate = _Locator()
    if main is not None:
        queue = [main]
    else:
        main = main_source()
        queue = [main] if main is not None else []
        queue += [m for m in importing_modules(locate) if main is None or m[0] != main[0]]
    if not queue:
        return None
    import ast
    seen = {m[0] for m in queue}
    while queue and len(seen) <= MAX_MODULES:
        name, package, path, source = queue.pop(0)
        try:
            if source is None:
                with open(path, "rb") as file:
                    source = file.read()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for imported in imported_names(tree, package):
            if matches(imported):
                return name, imported
            parts = imported.split(".")
            for depth in range(1, len(parts) + 1):
                module = ".".join(parts[:depth])
                if module in seen:
                    continue
                seen.add(module)
                found = locate(module)
                if found is not None:
                    file, is_package = found
                    queue.append((module, module if is_package else module.rpartition(".")[0],
                                  file, None))
    return None


def imported_names(tree, package: str):
    """The absolute module names a module's syntax tree imports (``from a import b`` gives ``a``
    and ``a.b``); ``package`` resolves relative imports. ``tf.estimator`` (``tf.compat.v1.
    estimator`` ...) reads as ``tensorflow.estimator``: a module TensorFlow binds as an
    attribute."""
    import ast
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "estimator" \
                and _tensorflow_attribute(node.value):
            yield "tensorflow.estimator"
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                if not parent:
                    continue
                base = f"{parent}.{base}" if base else parent
            if base:
                yield base
                yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            function = node.func
            called = getattr(function, "attr", None) or getattr(function, "id", None)
            if called in ("import_module", "__import__"):
                yield node.args[0].value


def _tensorflow_attribute(node) -> bool:
    """Whether ``node`` reads as ``tf``, ``tensorflow`` or one of their ``compat`` modules."""
    import ast
    while isinstance(node, ast.Attribute):
        if node.attr not in ("compat", "v1", "v2"):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id in ("tf", "tensorflow")


class _Locator:
    """Finds a module's source file without importing anything; None for a module that is not
    the program's own."""

    def __init__(self) -> None:
        import sysconfig
        paths = sysconfig.get_paths()
        skip = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")
                if key in paths}
        try:
            import site
            skip.update(site.getsitepackages())
            skip.add(site.getusersitepackages())
        except (AttributeError, ImportError):
            pass
        for name in NOT_THE_PROGRAM:
            module = sys.modules.get(name)
            if getattr(module, "__file__", None):
                skip.add(os.path.dirname(module.__file__))
        self._skip = tuple(os.path.realpath(p) + os.sep for p in skip if p)
        self._foreign = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
        self._foreign.update(NOT_THE_PROGRAM)

    def own(self, path: str) -> bool:
        return not (os.path.realpath(path) + os.sep).startswith(self._skip)

    def __call__(self, name: str):
        """(source file, whether it is a package) of the program's own module ``name``."""
        top = name.partition(".")[0]
        if top in self._foreign:
            return None
        found = self._find(name)
        if found is None or (found[0] is not None and not self.own(found[0])):
            if name == top:
                self._foreign.add(top)  # nothing below a foreign package is the program's
            return None
        file, is_package = found
        if file is None or not file.endswith(".py"):
            return None
        return file, is_package

    @staticmethod
    def _find(name: str):
        import importlib.machinery
        parts = name.split(".")
        search = None
        for depth in range(1, len(parts) + 1):
            module_name = ".".join(parts[:depth])
            module = sys.modules.get(module_name)
            if module is not None:
                file = getattr(module, "__file__", None)
                locations = getattr(module, "__path__", None)
            else:
                spec = importlib.machinery.PathFinder.find_spec(module_name, search)
                if spec is None:
                    return None
                file = spec.origin if spec.has_location else None
                locations = spec.submodule_search_locations
            if depth == len(parts):
                return file, locations is not None
            if locations is None:
                return None
            search = list(locations)
        return None
