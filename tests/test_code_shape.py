"""The launcher's shape, read from its source (no process started): the console script is
launch.py's ``main``; no module imports or reads another module's private name; ``spawned/``
(what runs in other processes) imports nothing from ``elastic/``; every module says what it
does."""
from __future__ import annotations

import ast
import configparser
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "popdist_launcher"
LAUNCHER = PACKAGE / "launcher"


def launcher_files():
    return [PACKAGE / "launch.py", PACKAGE / "__main__.py", *sorted(LAUNCHER.rglob("*.py"))]


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path):
    """(imported module, names) for every ``import`` / ``from ... import`` in ``path``,
    function-level ones included; relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
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
    found = []
    for path in launcher_files():
        for module, names in imports(path):
            if not module.startswith("popdist_launcher"):
                continue  # the standard library's C modules (_signal, _socket) are on purpose
            for name in names:
                if name.startswith("_") and not name.startswith("__") \
                        and not is_module(f"{module}.{name}"):
                    found.append(f"{path.relative_to(ROOT)}: from {module} import {name}")
    assert found == []


def test_no_module_reads_another_modules_private_name():
    """``module._name`` through an imported module of ours, e.g. ``wrapper._prctl()``."""
    found = []
    for path in launcher_files():
        tree = ast.parse(path.read_text(), str(path))
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


def test_every_launcher_module_says_what_it_does():
    missing = [str(p.relative_to(ROOT)) for p in launcher_files()
               if p.name != "__init__.py" and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []
