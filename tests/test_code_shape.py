"""The package's shape, read from its source (no process started). The launcher: the console
script is launch.py's ``main``; ``spawned/`` (what runs in other processes) imports nothing from
``elastic/``; ``wire/`` (what the processes say to each other) imports nothing of the package; the
launcher's folders (``LAUNCHER_LAYERS``, the modules directly in ``launcher/`` counted as one
unit) import each other in no circle and none imports a folder above it; the hang check imports
nothing of the supervision but the attempt's records. The whole package: every module says what
it does; no module imports or reads another module's private name (a private module,
``collectives/_state.py``, imported inside its unit is fine); no import circle between units (a
subpackage, a module directly in ``popdist_launcher/``, a folder of ``launcher/`` or
``launcher/``'s own modules together) beyond the known ones listed below, nor inside any folder
among its modules and subfolders (each subfolder one room); the library's layers
(``LIBRARY_LAYERS``) import nothing above them; no unit imports another subpackage's private
modules beyond those listed; Horovod's private names only in the seam modules
(``HOROVOD_SEAMS``); files at most 500 lines and classes at most 450, except the listed ones,
which may not grow; and a file past 450 lines or a class past 400 comes with a split plan
(``SPLIT_PLANS``). The lists are the debt the layering work pays off: an entry leaves when its
reason goes, and none is added. Imports are read as Python runs them,
function-level ones included: ``from m import n`` is an import of the submodule m.n where n is
one (m's __init__ runs on the way, as for any import of m.n, but the code depends on m.n only)
and of m where n is a name m defines."""
from __future__ import annotations

import ast
import configparser
import functools
import pathlib
from typing import Dict, FrozenSet, Iterable, List, Set

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "popdist_launcher"
LAUNCHER = PACKAGE / "launcher"


def launcher_files():
    return [PACKAGE / "launch.py", PACKAGE / "__main__.py", *sorted(LAUNCHER.rglob("*.py")),
            *sorted((PACKAGE / "wire").rglob("*.py"))]


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def tree_of(path: pathlib.Path) -> ast.Module:
    """The parsed module, once per test session."""
    return ast.parse(path.read_text(), str(path))


def imports(path: pathlib.Path):
    """(imported module, names) for every ``import`` / ``from ... import`` in ``path``,
    function-level ones included; relative imports resolved."""
    tree = tree_of(path)
    package = module_name(path) if path.name == "__init__.py" else \
        module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            yield base, tuple(alias.name for alias in node.names)


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def test_console_script_is_launch_main():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = [line.split("=", 1) for line in
               config["options.entry_points"]["console_scripts"].strip().splitlines()]
    assert {name.strip(): target.strip() for name, target in scripts} == \
        {"poprun-lite": "popdist_launcher.launch:main"}
    entry_modules = [p for p in launcher_files() if p.name == "entry.py"]
    assert entry_modules == []
    assert "from popdist_launcher.launch import main" in (PACKAGE / "__main__.py").read_text()


def test_no_module_imports_another_modules_private_name():
    """Anywhere in the package: ``from m import _name`` where ``_name`` is not a module. A private
    module (``collectives/_state.py``) imported inside its unit is fine; across units the test
    below on private modules rules."""
    found = []
    for path in package_files():
        for module, names in imports(path):
            if not module.startswith("popdist_launcher"):
                continue  # the standard library's C modules (_signal, _socket) are on purpose
            for name in names:
                if name.startswith("_") and not name.startswith("__") \
                        and not is_module(f"{module}.{name}"):
                    found.append(f"{path.relative_to(ROOT)}: from {module} import {name}")
    assert found == []


def test_no_module_reads_another_modules_private_name():
    """``module._name`` through an imported module of ours, e.g. ``wrapper._prctl()``, anywhere in
    the package (``_state.rank`` through a private module is a public name of it)."""
    found = []
    for path in package_files():
        tree = tree_of(path)
        ours = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                ours.update(a.asname or a.name.split(".")[0] for a in node.names
                            if a.name.startswith("popdist_launcher"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("popdist"):
                ours.update(a.asname or a.name for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ours and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: "
                             f"{node.value.id}.{node.attr}")
    assert found == []


def test_spawned_imports_nothing_from_elastic():
    found = []
    for path in sorted((LAUNCHER / "spawned").rglob("*.py")):
        for module, names in imports(path):
            targets = [module] + [f"{module}.{name}" for name in names]
            if any(t == "popdist_launcher.launcher.elastic"
                   or t.startswith("popdist_launcher.launcher.elastic.") for t in targets):
                found.append(f"{path.relative_to(ROOT)}: {module} {names}")
    assert found == []


def test_wire_imports_nothing_of_the_package_but_itself():
    """wire/ is the bottom layer: the launcher, the wrapper, the helper and the collectives
    import it, and it imports none of them."""
    found = []
    for path in sorted((PACKAGE / "wire").rglob("*.py")):
        for target in imported_modules(path):
            if target != "popdist_launcher.wire" \
                    and not target.startswith("popdist_launcher.wire."):
                found.append(f"{path.relative_to(ROOT)}: {target}")
    assert found == []


# --- the whole package ------------------------------------------------------------------------

MAX_FILE_LINES = 500
MAX_CLASS_LINES = 450

# A file past this many lines, or a class past that many, names its split in SPLIT_PLANS: growth
# that nears the bar is split in the change that brings it there, or the plan says how it will be.
WARN_FILE_LINES = 450
WARN_CLASS_LINES = 400
# "path" (a file) or "path:Class" -> the split, in one sentence.
SPLIT_PLANS: Dict[str, str] = {
    "popdist_launcher/launch.py":
        "the --config and --check-build callbacks and the boolean-value reading (_load_config, "
        "_config_kind, _check_build, _boolean_values) move to launcher/cli/.",
    "popdist_launcher/launcher/output/routing.py":
        "the output folder and its log files (open_output_dir, _writable, _dir_problem, "
        "LogFiles) move to output/log_files.py, leaving the Router.",
    "popdist_launcher/launcher/elastic/helper/elastic_driver.py":
        "the helper process's main, logging and heartbeat (main, _configure_logging, _end, "
        "_heartbeat) and JoinGate move to helper/helper_main.py, leaving the driver subclass.",
    "popdist_launcher/ipu_runtime/ipu_devices.py":
        "the naming of eager outputs after their IPU (_report_ipu_names to _naming) moves to "
        "ipu_runtime/ipu_output_names.py.",
    "popdist_launcher/strategies/popdist_strategy.py":
        "HorovodExtended moves to strategies/horovod_extended.py, leaving the strategy classes.",
}

# Files over the bar, each with the most lines it may have: growth past that fails.
FILES_OVER_THE_BAR: Dict[str, int] = {}
CLASSES_OVER_THE_BAR: Dict[str, int] = {}

# Import circles between units that exist today, each the largest set of units it may join
# (none left).
KNOWN_CIRCLES: List[FrozenSet[str]] = []

# The launcher's folders, lowest first: each imports none of those after it. The modules
# directly in launcher/ (options.py: the job's options, where every folder's settings meet) count
# as one unit, "launcher". output/ (the launcher's own lines, routing, reports) is the bottom,
# which everything writes through; spawned/ (what runs in other processes) needs only it;
# layout/ (hosts, ports, the plan, the backends, the topology) is pure planning; supervision/
# (one attempt, its processes, the hang check) runs a plan; elastic/ (discovery, policy,
# membership, the Horovod job's parts and helper) uses both; the options check every folder's
# values; the agents run a job from them; cli/ is what only the command line uses.
LAUNCHER_LAYERS: List[str] = ["launcher.output", "launcher.spawned", "launcher.layout",
                              "launcher.supervision", "launcher.elastic", "launcher",
                              "launcher.agents", "launcher.cli"]

# Private modules of one subpackage that another imports (none left: the IPU runtime internals
# that ipu/ and strategies/ shared are public modules of ipu_runtime/, below both).
KNOWN_PRIVATE_IMPORTS: Set[str] = set()

# The library's layers, lowest first: a unit imports units of its own layer or lower ones only.
# wire/ (what the processes say to each other, the environment contract); the launch
# environment (who started this process, TF_CONFIG, the stacks and progress it reports to the
# launcher); the compatibility layer (the import table, its finder and the modules its hooks
# apply); the IPU runtime (what the strategies and Graphcore's names stand on); the
# collectives; the strategies; Graphcore's names (ipu/, and popdist.py for ``popdist``); the
# package root's lazy facade. The launcher's own units (launch, __main__, launcher.*) and the
# install tools its --check-build runs (install/: they probe TensorFlow and Horovod in child
# interpreters) are not in it: they stand on wire/ and compat's Keras choice, and import no
# library layer above.
LIBRARY_LAYERS: List[FrozenSet[str]] = [
    frozenset({"wire"}),
    frozenset({"runtime", "tf_config", "stack_dump", "whereabouts"}),
    frozenset({"compat"}),
    frozenset({"ipu_runtime"}),
    frozenset({"collectives"}),
    frozenset({"strategies"}),
    frozenset({"ipu", "popdist"}),
    frozenset({"popdist_launcher"}),
]
LAUNCHER_UNITS = ("launch", "__main__", "launcher", "install")


def package_files() -> List[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def unit_of(dotted: str) -> str:
    """The unit a module belongs to: a subpackage of ``popdist_launcher`` or a folder of
    ``launcher``, or a module directly in ``popdist_launcher`` (``popdist_launcher`` itself for
    the package's __init__); the modules directly in ``launcher`` are one unit, ``launcher``."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return "popdist_launcher"
    if parts[1] == "launcher":
        if len(parts) == 2 or not (LAUNCHER / parts[2]).is_dir():
            return "launcher"
        return f"launcher.{parts[2]}"
    return parts[1]


def imported_modules(path: pathlib.Path) -> Iterable[str]:
    """Every module of ours that ``path`` imports. ``from m import n`` is an import of the
    submodule m.n where n is one (Python runs m's __init__ on the way, as for any import of
    m.n, but the code depends on m.n only) and of m itself where n is a name m defines (e.g.
    ``from popdist_launcher import report_progress`` imports the package's __init__)."""
    for module, names in imports(path):
        if not module.startswith("popdist_launcher"):
            continue
        submodules = [f"{module}.{name}" for name in names if is_module(f"{module}.{name}")]
        yield from submodules
        if not names or len(submodules) < len(names):
            yield module


@functools.lru_cache(maxsize=None)
def unit_graph() -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {}
    for path in package_files():
        source = unit_of(module_name(path))
        for target in imported_modules(path):
            if unit_of(target) != source:
                edges.setdefault(source, set()).add(unit_of(target))
    return edges


def circles(edges: Dict[str, Set[str]]) -> List[FrozenSet[str]]:
    """The graph's strongly connected components of two or more units (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[FrozenSet[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for other in edges.get(unit, ()):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == unit:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for unit in sorted(edges):
        if unit not in index:
            visit(unit)
    return found


def test_circles_finds_a_circle_and_nothing_else():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert circles({"a": {"b"}, "b": {"c"}}) == []


def test_every_package_module_says_what_it_does():
    missing = [str(p.relative_to(ROOT)) for p in package_files()
               if p.name != "__init__.py" and not ast.get_docstring(tree_of(p))]
    assert missing == []


def test_no_import_circle_between_units_beyond_the_known_ones():
    new = [sorted(circle) for circle in circles(unit_graph())
           if not any(circle <= known for known in KNOWN_CIRCLES)]
    assert new == [], "units that import each other (break the circle: move what both need " \
        "into a unit below them)"


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LIBRARY_LAYERS) if unit in layer)


def upward_imports(edges: Dict[str, Set[str]]) -> List[str]:
    """Every edge from a library unit to a unit of a higher layer."""
    return sorted(f"{source} -> {target}" for source, targets in edges.items()
                  for target in targets
                  if source.split(".")[0] not in LAUNCHER_UNITS
                  and target.split(".")[0] not in LAUNCHER_UNITS
                  and layer_of(target) > layer_of(source))


def test_upward_imports_finds_an_import_from_a_lower_layer_to_a_higher_one():
    assert upward_imports({"strategies": {"ipu_runtime"}, "ipu_runtime": {"compat"}}) == []
    assert upward_imports({"ipu_runtime": {"ipu", "wire"}}) == ["ipu_runtime -> ipu"]


def test_every_library_unit_has_a_layer():
    units = {unit_of(module_name(p)) for p in package_files()}
    library = {u for u in units if u.split(".")[0] not in LAUNCHER_UNITS}
    assert library - set().union(*LIBRARY_LAYERS) == set(), "add the unit to LIBRARY_LAYERS"


def test_library_layers_import_only_their_own_layer_or_lower_ones():
    found = []
    for path in package_files():
        source = unit_of(module_name(path))
        for target in imported_modules(path):
            for edge in upward_imports({source: {unit_of(target)}}):
                found.append(f"{path.relative_to(ROOT)}: imports {target} ({edge})")
    assert found == [], "move what the lower layer needs down, or the importing code up"


def launcher_graph() -> Dict[str, Set[str]]:
    """The launcher's units (its folders, and its own modules as one) and what each imports."""
    return {source: {t for t in targets if t.split(".")[0] == "launcher"}
            for source, targets in unit_graph().items() if source.split(".")[0] == "launcher"}


def test_every_launcher_folder_has_a_layer():
    folders = {f"launcher.{p.name}" for p in LAUNCHER.iterdir() if (p / "__init__.py").exists()}
    assert folders | {"launcher"} == set(LAUNCHER_LAYERS), "add the folder to LAUNCHER_LAYERS"


def test_the_launchers_folders_import_each_other_in_no_circle():
    """The launcher's own modules count as one unit: a circle through them is a circle."""
    assert circles(launcher_graph()) == [], "move what both need into the folder below them"


def test_the_launchers_layers_import_nothing_above_them():
    edges = launcher_graph()
    upward = [f"{low} -> {high}" for i, low in enumerate(LAUNCHER_LAYERS)
              for high in LAUNCHER_LAYERS[i + 1:] if high in edges.get(low, ())]
    assert upward == [], "an arrow runs up: move what the lower unit needs down to it"


def test_the_hang_check_imports_of_the_supervision_only_the_attempts_records():
    """The supervisor feeds the hang check and gives it a Port; the check reads the attempt's
    records (instances, failures) and nothing else of the supervision."""
    hang = LAUNCHER / "supervision" / "hang"
    allowed = {"popdist_launcher.launcher.supervision.attempt"}
    found = []
    for path in sorted(hang.rglob("*.py")):
        for target in imported_modules(path):
            if target.startswith("popdist_launcher.launcher.supervision") \
                    and not target.startswith("popdist_launcher.launcher.supervision.hang") \
                    and target not in allowed:
                found.append(f"{path.relative_to(ROOT)}: {target}")
    assert found == []


def test_no_unit_imports_another_subpackages_private_module_beyond_the_known_ones():
    found = set()
    for path in package_files():
        source = unit_of(module_name(path))
        for target in imported_modules(path):
            parts = target.split(".")
            private = [i for i, part in enumerate(parts) if i >= 2 and part.startswith("_")
                       and not part.startswith("__")]
            if private and unit_of(target) != source and len(parts) > 2:
                found.add(f"{source} -> {'.'.join(parts[:private[0] + 1])}")
    assert found - KNOWN_PRIVATE_IMPORTS == set()


def test_files_and_classes_stay_under_the_bar():
    too_big = []
    for path in package_files():
        name = str(path.relative_to(ROOT))
        source = path.read_text()
        limit = FILES_OVER_THE_BAR.get(name, MAX_FILE_LINES)
        if len(source.splitlines()) > limit:
            too_big.append(f"{name}: {len(source.splitlines())} lines (at most {limit})")
        for node in ast.walk(tree_of(path)):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                limit = CLASSES_OVER_THE_BAR.get(f"{name}:{node.name}", MAX_CLASS_LINES)
                if lines > limit:
                    too_big.append(f"{name}: class {node.name} {lines} lines (at most {limit})")
    assert too_big == [], "split what grew past the bar in the same change"


def test_the_lists_of_known_debt_name_only_what_is_still_there():
    """An entry whose file shrank under the bar, or whose circle is gone, leaves the list."""
    for name, limit in FILES_OVER_THE_BAR.items():
        assert len((ROOT / name).read_text().splitlines()) > MAX_FILE_LINES, name
    current = circles(unit_graph())
    for known in KNOWN_CIRCLES:
        assert any(circle <= known and len(circle) > 1 for circle in current), sorted(known)


def over_the_warning_bar() -> Dict[str, int]:
    """Every file past WARN_FILE_LINES and class past WARN_CLASS_LINES ("path:Class"), with its
    lines."""
    found = {}
    for path in package_files():
        name = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > WARN_FILE_LINES:
            found[name] = lines
        for node in ast.walk(tree_of(path)):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > WARN_CLASS_LINES:
                    found[f"{name}:{node.name}"] = lines
    return found


def test_what_nears_the_bar_has_a_split_plan():
    """A file past 450 lines or a class past 400 names its split in SPLIT_PLANS, one sentence;
    a plan leaves the dict when its file or class is back under."""
    over = over_the_warning_bar()
    assert sorted(set(over) - set(SPLIT_PLANS)) == [], \
        "add a one-sentence split plan to SPLIT_PLANS, or split it now"
    assert sorted(set(SPLIT_PLANS) - set(over)) == [], "it is under the bar now: drop its plan"
    assert all(plan.strip() and plan.count(". ") == 0 for plan in SPLIT_PLANS.values())


def test_the_collectives_modules_import_each_other_in_no_circle():
    """Inside collectives/ the layers run one way: the state, then how collectives are named and
    tracked, then the collectives, then the groups and barriers. (``from
    popdist_launcher.collectives import _state`` reads a module, not the package's __init__.)"""
    edges: Dict[str, Set[str]] = {}
    for path in sorted((PACKAGE / "collectives").glob("*.py")):
        source = module_name(path)
        for target in imported_modules(path):
            if target.startswith("popdist_launcher.collectives.") and target != source:
                edges.setdefault(source, set()).add(target)
    assert "popdist_launcher.collectives._tracking" in \
        edges["popdist_launcher.collectives._allreduce"]
    assert circles(edges) == []


# --- the rooms: inside each unit --------------------------------------------------------------

def folder_graph(folder: pathlib.Path) -> Dict[str, Set[str]]:
    """The imports among one folder's rooms: each module directly in ``folder`` (its __init__
    as the package's own name) and each subfolder counted as one room with everything below it.
    Function-level imports count, as Python runs them."""
    base = module_name(folder / "__init__.py")

    def room(dotted: str):
        if dotted == base:
            return base
        if not dotted.startswith(base + "."):
            return None
        return f"{base}.{dotted[len(base) + 1:].split('.')[0]}"

    edges: Dict[str, Set[str]] = {}
    for path in package_files():
        source = room(module_name(path))
        if source is None:
            continue
        for target in imported_modules(path):
            other = room(target)
            if other is not None and other != source:
                edges.setdefault(source, set()).add(other)
    return edges


def test_folder_graph_counts_a_subfolder_as_one_room():
    edges = folder_graph(PACKAGE / "ipu")
    assert "popdist_launcher.ipu.ops" in edges["popdist_launcher.ipu.ipu_pipeline_estimator"]
    assert not any("popdist_launcher.ipu.ops." in t for ts in edges.values() for t in ts)


def test_no_folder_has_an_import_circle_among_its_modules():
    """In every folder of the package (each unit, and each subfolder inside one), the modules
    and subfolders import each other in no circle: what two of them share moves into a module
    both import. The package's __init__ counts as a module of its folder."""
    found = []
    for folder in sorted({p.parent for p in package_files()}):
        for circle in circles(folder_graph(folder)):
            found.append(f"{folder.relative_to(ROOT)}: "
                         f"{sorted(name.rpartition('.')[2] for name in circle)}")
    assert found == [], "move what the modules of a circle share into a module they all import"


# --- Horovod's private names ------------------------------------------------------------------

# The modules that hold every private name of Horovod's that the package touches, one function
# each, checked against the installed Horovod by tests/test_horovod_seams.py.
HOROVOD_SEAMS = ("popdist_launcher/compat/horovod_seams.py",
                 "popdist_launcher/launcher/elastic/helper/horovod_seams.py")


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def root_name(node: ast.AST):
    """The name an expression is built on: ``a`` for ``a.b(c)[d].e``; None for anything else."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


@functools.lru_cache(maxsize=None)
def seam_declared_names() -> FrozenSet[str]:
    """Every private name the seam modules spell (a string or an attribute): the Horovod names
    a class built on Horovod's may override (its methods of those names), never read itself."""
    names = set()
    for seam in HOROVOD_SEAMS:
        for node in ast.walk(tree_of(ROOT / seam)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and is_private(node.value) and node.value.isidentifier():
                names.add(node.value)
            elif isinstance(node, ast.Attribute) and is_private(node.attr):
                names.add(node.attr)
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def horovod_hook_functions() -> FrozenSet[str]:
    """``module:function`` of each import table hook that runs on a Horovod module's import."""
    found = set()
    for node in ast.walk(tree_of(PACKAGE / "compat" / "import_table.py")):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Hook" \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) \
                and str(node.args[0].value).split(".")[0] == "horovod":
            found.add(node.args[1].value)
    return frozenset(found)


def horovod_private_uses(path: pathlib.Path) -> List[str]:
    """Private Horovod names ``path`` uses: see test_no_private_horovod_name_outside_the_seams."""
    return private_horovod_names_in(tree_of(path), str(path.relative_to(ROOT)),
                                    module_name(path))


def private_horovod_names_in(tree: ast.Module, where: str, module: str) -> List[str]:
    found: List[str] = []
    horovod: Set[str] = set()  # names bound to Horovod's modules, classes and objects
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "horovod":
                    horovod.add(alias.asname or alias.name.split(".")[0])
                    if any(is_private(part) for part in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level \
                and (node.module or "").split(".")[0] == "horovod":
            for alias in node.names:
                horovod.add(alias.asname or alias.name)
                if any(is_private(part) for part in [*node.module.split("."), alias.name]):
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):  # a hook on a Horovod module's import is given that module
        if isinstance(node, ast.FunctionDef) and node.args.args \
                and f"{module}:{node.name}" in horovod_hook_functions():
            horovod.add(node.args.args[0].arg)
    while True:  # names assigned from Horovod's values, and classes built on Horovod's
        grown = set(horovod)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and root_name(node.value) in horovod:
                grown.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ClassDef) and any(root_name(b) in horovod
                                                        for b in node.bases):
                grown.add(node.name)
        if grown == horovod:
            break
        horovod = grown
    if not horovod:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) \
                and root_name(node.value) in horovod:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and root_name(node.func.value) in horovod and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
            found.append(f"{where}:{node.lineno}: {ast.unparse(node.func)}(self, ...) "
                         f"skips the class's own method")
    declared = seam_declared_names()
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name in horovod):
            continue
        methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))}
        assigned = {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Attribute) and root_name(t) == "self"}
        own = (methods | assigned) - declared
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                through_self = isinstance(node.value, ast.Name) and node.value.id == "self"
                through_super = isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "super"
                overridden = node.attr in methods and node.attr in declared
                if (through_self and node.attr not in own and not overridden) \
                        or (through_super and not overridden):
                    found.append(f"{where}:{node.lineno}: {cls.name}: {ast.unparse(node)}")
    touches_horovod = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)) \
        and bool(horovod)
    if touches_horovod:  # a function patched onto a Horovod class: ``def f(self)`` outside one
        in_class = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                    for n in c.body}
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and id(function) not in in_class \
                    and function.args.args and function.args.args[0].arg == "self":
                for node in ast.walk(function):
                    if isinstance(node, ast.Attribute) and is_private(node.attr) \
                            and isinstance(node.value, ast.Name) and node.value.id == "self":
                        found.append(f"{where}:{node.lineno}: {function.name}: "
                                     f"{ast.unparse(node)}")
    return found


def test_private_horovod_names_are_found_each_way():
    def uses(source: str) -> List[str]:
        return [line.split(": ", 1)[1]
                for line in private_horovod_names_in(ast.parse(source), "m.py", "m")]

    assert uses("from horovod.runner.elastic import driver\nt = driver._epoch_time_s()") == \
        ["driver._epoch_time_s"]
    assert uses("from horovod.common import _basics") == \
        ["from horovod.common import _basics"]
    assert uses("import horovod.tensorflow as hvd\nhvd.mpi_ops._basics.init()") == \
        ["hvd.mpi_ops._basics"]
    assert uses("from horovod.common.elastic import State\ns = State\ns._x = 1") == ["s._x"]
    assert uses("from horovod.runner.common.util import network\n"
                "class C(network.BasicClient):\n"
                "    def __init__(self):\n"
                "        network.BasicClient.__init__(self, 1)\n") == \
        ["network.BasicClient.__init__(self, ...) skips the class's own method"]
    subclass = ("from horovod.runner.elastic.driver import ElasticDriver\n"
                "class D(ElasticDriver):\n"
                "    def __init__(self):\n"
                "        self._mine = 1\n"
                "    def _helper(self):\n"
                "        return self._mine, self._host_manager, self._timeout\n"
                "    def _activate_workers(self, n):\n"
                "        return super()._activate_workers(n), self._helper()\n")
    # _timeout and _activate_workers are the helper seams' (declared): the override is allowed,
    # reading the attribute is not; _host_manager is declared too, _mine and _helper are D's.
    assert uses(subclass) == ["D: self._host_manager", "D: self._timeout"]
    assert uses("import horovod\ndef sync(self):\n    self._bcast_model = None\n") == \
        ["sync: self._bcast_model"]
    assert uses("import os\ndef f(self):\n    return self._x, os._exit") == []


def test_no_private_horovod_name_outside_the_seams():
    """Horovod's private names are used only in the seam modules (``HOROVOD_SEAMS``), where
    tests/test_horovod_seams.py checks each against the installed Horovod. Read from the source
    of every other module of the package: no ``from horovod... import _x`` or ``import
    horovod._x``; no ``X._y`` on a Horovod value (a name bound by importing Horovod, a hook's
    module argument where the import table hooks a Horovod module, or a name assigned from
    either, e.g. ``driver._epoch_time_s()``); no Horovod class's method called unbound with
    ``self`` (``BasicClient.__init__(self, ...)`` skips the parent's own); in a class built on a
    Horovod class, no ``self._x`` or ``super()._x`` but the class's own names (the methods it
    defines and the attributes it assigns), where a name the seams spell is Horovod's: the
    class may override such a method and call ``super()``'s, never read it otherwise; and in a
    module that imports Horovod, no ``self._x`` in a function outside a class (a method patched
    onto a Horovod class). What stays unseen: a private name reached through a value the source
    does not show to be Horovod's (a parameter, a return value)."""
    found = []
    for path in package_files():
        if str(path.relative_to(ROOT)) not in HOROVOD_SEAMS:
            found += horovod_private_uses(path)
    assert found == [], "put the name behind a function of a seam module and test it there"
