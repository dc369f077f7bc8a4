"""The package's own names work as Graphcore's do: the same programs written with
``from popdist_launcher import ipu, popdist`` (and ``popdist_launcher.ipu.X``) instead of
``tensorflow.python.ipu`` / ``popdist`` give the same numbers under poprun-lite; every
``popdist_launcher`` name the docs and the package's docstrings offer resolves."""
import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

ROOT = Path(__file__).resolve().parents[1]
GRAPHCORE_PROGRAMS = ROOT / "tests" / "graphcore" / "programs"
IPU_PROGRAMS = ROOT / "tests" / "programs_ipu"


def respell(source: str) -> str:
    """``source`` with Graphcore's imports written as this package's names."""
    rules = (
        (r"^(\s*)import popdist\.tensorflow\b.*$",
         r"\1pass  # popdist.tensorflow comes with popdist"),
        (r"^(\s*)import popdist\b(?!\.)", r"\1from popdist_launcher import popdist"),
        (r"^(\s*)from tensorflow\.python import ipu\b", r"\1from popdist_launcher import ipu"),
        (r"^(\s*)from tensorflow\.python\.ipu(\.[\w.]+)? import",
         r"\1from popdist_launcher.ipu\2 import"),
        (r"^(\s*)import tensorflow\.python\.ipu\.([\w.]+) as",
         r"\1import popdist_launcher.ipu.\2 as"),
    )
    for pattern, replacement in rules:
        source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    return source


def test_respell_writes_each_graphcore_import_as_ours():
    graphcore = ("import popdist\nimport popdist.tensorflow\nfrom tensorflow.python import ipu\n"
                 "from tensorflow.python.ipu import horovod as hvd\n"
                 "from tensorflow.python.ipu.distributed import popdist_strategy\n"
                 "import tensorflow.python.ipu.nn_ops as flat\n")
    ours = respell(graphcore)
    assert ours.splitlines() == [
        "from popdist_launcher import popdist",
        "pass  # popdist.tensorflow comes with popdist",
        "from popdist_launcher import ipu",
        "from popdist_launcher.ipu import horovod as hvd",
        "from popdist_launcher.ipu.distributed import popdist_strategy",
        "import popdist_launcher.ipu.nn_ops as flat"]


def close(got, want, path="") -> None:
    """``got`` equals ``want``: numbers to float tolerance, everything else exactly."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), path
        for key in want:
            close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list) and want and all(isinstance(w, (int, float)) for w in want):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=path)
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-7), path
    else:
        assert got == want, path


# program, its arguments after OUT_DIR, poprun-lite's options, the files it writes
PROGRAMS = {
    # TF2: PopDistStrategy, popdist.tensorflow.set_ipu_config, ipu.horovod collectives.
    "custom_loop": (IPU_PROGRAMS / "popdist_custom_loop.py", [], ["-np", "2"],
                    "custom_loop-{i}.json"),
    # TF1 replication: cross-replica ops, a CrossReplicaGradientAccumulationOptimizerV2 loop,
    # replicated IPUStrategy; and Keras gradient accumulation under PopDistStrategy.
    "distributed": (GRAPHCORE_PROGRAMS / "distributed.py", [],
                    ["-np", "2", "--num-replicas", "4"], "dist-{i}.json"),
    # TF1 graphs placed on /device:IPU:0 under ipu_scope.
    "device_names_tf1": (GRAPHCORE_PROGRAMS / "ipu_device_names_tf1.py", [], ["-np", "2"],
                         "device-names-{i}.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_same_program_through_both_spellings_gives_the_same_numbers(tmp_path, name):
    program, args, options, written = PROGRAMS[name]
    ours = tmp_path / f"ours_{program.name}"
    ours.write_text(respell(program.read_text()))
    assert "tensorflow.python.ipu" not in ours.read_text()
    results = {}
    for spelling, path in (("graphcore", program), ("ours", ours)):
        out = tmp_path / spelling
        out.mkdir()
        result = poprun(*options, str(path), str(out), *args, timeout=600)
        assert result.returncode == 0, f"{spelling}:\n{result.stderr[-4000:]}"
        results[spelling] = [json.loads((out / written.format(i=i)).read_text())
                             for i in range(int(options[1]))]
    close(results["ours"], results["graphcore"])


def test_every_provided_ipu_name_imports_from_popdist_launcher_ipu_as_the_same_object():
    # tests/graphcore/test_api_inventory.py's inventory, through the package's own spelling.
    inventory = json.loads(
        (ROOT / "tests" / "graphcore" / "data" / "ipu_api_names.json").read_text())
    missing, different = [], []
    for module, names in inventory.items():
        provided = [n for n, r in names.items() if r["provided"]]
        if not provided:
            continue
        ours = importlib.import_module("popdist_launcher." + module)
        graphcore = importlib.import_module("tensorflow.python." + module)
        parent, _, leaf = f"popdist_launcher.{module}".rpartition(".")
        assert getattr(importlib.import_module(parent), leaf) is ours, module
        assert ours is graphcore, module
        missing += [f"{module}.{n}" for n in provided if not hasattr(ours, n)]
        different += [f"{module}.{n}" for n in provided
                      if hasattr(ours, n) and getattr(ours, n) is not getattr(graphcore, n)]
    assert missing == [] and different == []
    assert len(inventory) > 50
    # The ops and optimizer modules Graphcore's package also has at its top, as modules.
    from popdist_launcher.compat import import_table as table
    for name in (*table.IPU_OPS, *table.IPU_OPTIMIZERS):
        ours = importlib.import_module(f"popdist_launcher.ipu.{name}")
        assert ours is importlib.import_module(f"tensorflow.python.ipu.{name}"), name


# -- every popdist_launcher name the docs and the docstrings offer

NAME = re.compile(r"\bpopdist_launcher(?:\.[A-Za-z_]\w*)+")
# Names the docs quote as gone: the error an older checkout's console script gives
# (troubleshooting).
GONE = {"popdist_launcher.launcher.entry"}
FROM_IMPORT = re.compile(r"\bfrom (popdist_launcher(?:\.\w+)*) import ([\w, ]+)")


def offered_names() -> set:
    """Every dotted ``popdist_launcher`` name (and ``from popdist_launcher[.X] import Y``) in
    README.md, docs/ and the package's docstrings."""
    texts = [ROOT.joinpath("README.md").read_text()]
    texts += [page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))]
    for path in sorted((ROOT / "popdist_launcher").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                texts.append(ast.get_docstring(node) or "")
    names = set()
    for text in texts:
        names.update(n for n in NAME.findall(text) if not n.endswith(".pth"))
        for module, imported in FROM_IMPORT.findall(text):
            names.update(f"{module}.{n.strip()}" for n in imported.split(",") if n.strip())
    return names - GONE


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute reached from the longest module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def test_every_popdist_launcher_name_the_docs_and_docstrings_offer_resolves():
    # In a fresh interpreter: a program's view, nothing imported by the test run before.
    names = sorted(offered_names())
    assert "popdist_launcher.ipu" in names and "popdist_launcher.ipu.config" in names
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from test_own_spellings import resolves; "
            "print(json.dumps([n for n in json.loads(sys.argv[2]) if not resolves(n)]))")
    result = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent),
                             json.dumps(names)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_popdist_launcher_popdist_is_graphcores_popdist_with_its_tensorflow_module():
    code = ("from popdist_launcher import popdist as ours; import popdist, popdist.tensorflow; "
            "import sys; print(ours is popdist, ours.tensorflow is popdist.tensorflow, "
            "sorted(set(popdist.__all__) - set(dir(ours))), 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "True", "[]", "False"]  # and no TensorFlow import
