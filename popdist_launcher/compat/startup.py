"""Run at every interpreter start by ``popdist_launcher.pth`` in site-packages: puts the one
finder that applies the import table (popdist_launcher.compat.import_table) first on sys.meta_path.

The table says which names import as which modules (``tensorflow.python.ipu[.X]`` as
``popdist_launcher.ipu[.X]``, the same module objects; ``keras`` as tf-keras where tf.keras is
Keras 2; TensorFlow 2.6's moved Keras modules; TensorFlow's removed modules) and which hooks run
after (or before) a module imports, each while its switches are on. Standard library only;
nothing is imported until a program imports one of those modules.
As TensorFlow or ``keras`` begins to import it decides the program's Keras (``choose_keras``,
popdist_launcher.compat.keras2.choose): Keras 2 for programs written for it, else TensorFlow's
own; as NumPy or TensorFlow imports, whether it is an IPU program (``decide_ipu_program``).
POPDIST_LAUNCHER_IPU_ALIAS=0 turns Graphcore's names off.
"""
import gc
import os
import sys

from popdist_launcher.compat import import_table as table


def _call(function: str, argument):
    """Call "package.module:function" with ``argument``."""
    import importlib
    module_name, _, name = function.partition(":")
    return getattr(importlib.import_module(module_name), name)(argument)


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _initializing(module) -> bool:
    """Whether ``module``'s code is still running (a switch turned on while it imports: its hooks
    wait for the end of its import, where the finder runs its pending ones)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class SameModuleLoader:
    """Loads a name as another name's module and leaves that module's own spec in place.
    ``graphcore``: the name is one of Graphcore's, so the program is an IPU program."""

    def __init__(self, target: str, graphcore: bool = False) -> None:
        self._target = target
        self._graphcore = graphcore
        self._spec = None

    def create_module(self, spec):
        import importlib
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        if self._graphcore:
            switch_on("ipu-program")
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set the alias's spec: keep the real one


class _MadeModuleLoader:
    """Loads a name as the module a table entry's ``make`` function builds for it."""

    def __init__(self, make: str) -> None:
        self._make = make

    def create_module(self, spec):
        return _call(self._make, spec.name)

    def exec_module(self, module) -> None:
        pass


class ImportTableFinder:
    """The meta path finder that applies the import table: answers the table's names, and runs
    its hooks (and those ``after_import`` adds) around the imports of their modules."""

    def __init__(self, on) -> None:
        self.on = set(on)  # the switches that are on
        self.pending: dict = {}  # module name -> ["package.module:function", ...] to run after
        self.before: dict = {}  # module name -> [...] to run when it is looked up
        self._armed: set = set()  # indices in table.HOOKS already registered
        self._aliased: dict = {}  # name -> the module it was answered as
        self._keras_2 = None

    # -- switches and hooks
    def switch_on(self, switch: str) -> None:
        if switch not in self.on:
            self.on.add(switch)
            self.arm()

    def arm(self) -> None:
        """Register every hook of the table whose switches are all on (once each); one whose
        module has imported already runs now."""
        ready = []
        for index, hook in enumerate(table.HOOKS):
            if index in self._armed or not all(s in self.on for s in hook.when):
                continue
            self._armed.add(index)
            module = self._resolve(hook.module)
            if hook.before:
                self.before.setdefault(module, []).append(hook.function)
            elif module in sys.modules and not _initializing(sys.modules[module]):
                ready.append((hook.function, sys.modules[module]))
            else:
                self.pending.setdefault(module, []).append(hook.function)
        for function, module in ready:
            _call(function, module)

    def add_hook(self, module_name: str, function: str) -> None:
        if module_name in sys.modules:
            _call(function, sys.modules[module_name])
        else:
            self.pending.setdefault(module_name, []).append(function)

    def _resolve(self, name: str) -> str:
        if table.KERAS_2 not in name:
            return name
        if self._keras_2 is None:
            from popdist_launcher.compat import keras2
            self._keras_2 = keras2.package()
        return name.replace(table.KERAS_2, self._keras_2)

    # -- the finder
    def find_spec(self, fullname, path=None, target=None):
        for function in self.before.get(fullname, ()):
            _call(function, fullname)
        spec = self._table_spec(fullname, path, target)
        frozen = fullname in table.FROZEN_AFTER_IMPORT and "instance" in self.on
        if not self.pending.get(fullname) and not frozen:
            return spec
        if spec is None:
            spec = self._real_spec(fullname, path, target)
        return self._with_hooks(fullname, spec, frozen)

    def _table_spec(self, fullname, path, target):
        """The spec the table gives ``fullname``; the real one where a table entry gives way to
        it; None where the table has nothing to say."""
        entries = table.aliases_for(fullname, self.on)
        parent, _, child = fullname.rpartition(".")
        # Below a module the table answered, everything is the answer's: the import system would
        # otherwise load a second copy from the real package's folder.
        inside = (parent in self._aliased
                  and getattr(sys.modules.get(parent), "__name__", parent) != parent)
        if not entries and not inside:
            return None
        first = [e for e in entries if e.shadows or inside]
        if inside:
            first.append(f"{sys.modules[parent].__name__}.{child}")
        spec = self._alias_spec(fullname, first)
        if spec is not None:
            return spec
        if inside:  # a child the answer lacks: the entry's sentence where it has one
            message = next((e.message for e in entries if e.message), None)
            if message is not None:
                raise ModuleNotFoundError(message, name=fullname)
            return None
        rest = [e for e in entries if not e.shadows]
        if not rest:
            return None
        spec = self._real_spec(fullname, path, target)  # a module TensorFlow or Keras has wins
        if spec is None:
            spec = self._alias_spec(fullname, rest)
        if spec is None:
            message = next((e.message for e in rest if e.message), None)
            if message is not None:
                raise ModuleNotFoundError(message, name=fullname)
        return spec

    def _alias_spec(self, fullname, candidates):
        import importlib.util
        for candidate in candidates:
            graphcore = False
            if isinstance(candidate, str):
                target = candidate
            elif candidate.make is not None:
                return importlib.util.spec_from_loader(fullname, _MadeModuleLoader(candidate.make))
            elif candidate.target is None:
                continue
            elif _inside(fullname, self._resolve(candidate.target)):
                continue  # ``keras.src.X`` under ``keras`` -> ``keras.src``: the target's own
            else:
                target = self._resolve(candidate.target_of(fullname))
                graphcore = candidate.graphcore
            try:
                real = importlib.util.find_spec(target)
            except (ModuleNotFoundError, ValueError):
                real = None
            if real is None:
                continue
            self._aliased[fullname] = target
            return importlib.util.spec_from_loader(
                fullname, SameModuleLoader(target, graphcore),
                is_package=real.submodule_search_locations is not None)
        return None

    def _real_spec(self, fullname, path, target):
        """What the finders after this one find for ``fullname``."""
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                return spec
        return None

    def _with_hooks(self, fullname, spec, frozen=False):
        """``spec`` whose loader runs the module's pending hooks once its code has run (the
        module is complete in sys.modules by then). The hooks stay pending until then:
        ``find_spec`` is also called only to ask whether a module exists. ``frozen``: the
        garbage collector, where it is on, is off meanwhile and what the import and its hooks
        made is frozen after them (table.FROZEN_AFTER_IMPORT); an import that fails freezes
        nothing."""
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec  # a namespace package or an old-style loader: no hook
        real_exec = loader.exec_module

        def exec_module(module):
            paused = frozen and gc.isenabled()
            if paused:
                gc.disable()
            try:
                real_exec(module)
                try:
                    del loader.exec_module  # one module per loader: back to the class's method
                except AttributeError:
                    pass
                while self.pending.get(fullname):  # and those a hook's switch adds meanwhile
                    for function in self.pending.pop(fullname):
                        _call(function, module)
            except BaseException:
                if paused:
                    gc.enable()
                raise
            if paused:
                gc.freeze()
                gc.enable()

        loader.exec_module = exec_module
        return spec


def finder() -> ImportTableFinder:
    """The finder on sys.meta_path (put first, once)."""
    for found in sys.meta_path:
        if type(found).__name__ == "ImportTableFinder":
            return found
    found = ImportTableFinder(table.switches_from(os.environ))
    sys.meta_path.insert(0, found)
    found.arm()
    return found


def switch_on(switch: str) -> None:
    """Turn a switch of the import table on: its hooks run from now on."""
    finder().switch_on(switch)


def after_import(module_name: str, hook: str) -> None:
    """Run ``hook`` ("package.module:function", called with the module) once ``module_name``
    has been imported; at once when it already has been (for hooks outside the table)."""
    finder().add_hook(module_name, hook)


def decide_ipu_program(_module=None) -> None:
    """Hook on NumPy's and TensorFlow's import: turn ``ipu-program`` on where the program's own
    source names Graphcore's modules (``ipu_program.graphcore_import``)."""
    if "ipu-program" in finder().on:
        return
    from popdist_launcher.compat import ipu_program
    found = ipu_program.graphcore_import()
    if found is not None:
        import logging
        logging.getLogger(__name__).debug(
            "%s imports %s: TensorFlow 2.6's Keras optimizers, NumPy 1.x's names", *found)
        switch_on("ipu-program")


def choose_keras(_name=None) -> None:
    """Before ``tensorflow`` or ``keras`` imports: decide the program's Keras before TensorFlow
    reads ``TF_USE_LEGACY_KERAS``; ``keras`` is tf-keras where tf.keras is Keras 2 from tf-keras."""
    if "tf-keras" not in finder().on:
        from popdist_launcher.compat import keras2
        if keras2.choose():
            switch_on("tf-keras")


_finder = finder()
if "instance" in _finder.on:  # started by poprun-lite's wrapper: stacks on request
    from popdist_launcher.stack_dump import register_from_environ
    register_from_environ()
