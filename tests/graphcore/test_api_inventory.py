"""The inventory of Graphcore's ``tensorflow.python.ipu`` names (data/ipu_api_names.json, both
TensorFlow lines): every name marked provided imports as Graphcore's programs import it, and
every other one is listed with its reason in docs/ipu-api-coverage.md."""
import importlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = json.loads((Path(__file__).parent / "data" / "ipu_api_names.json").read_text())
COVERAGE = (ROOT / "docs" / "ipu-api-coverage.md").read_text()


def test_every_provided_name_imports_from_tensorflow_python_ipu():
    missing = []
    for module, names in INVENTORY.items():
        provided = [n for n, r in names.items() if r["provided"]]
        if not provided:
            continue
        path = "tensorflow.python." + module
        mod = importlib.import_module(path)
        parent, _, leaf = path.rpartition(".")
        assert getattr(importlib.import_module(parent), leaf) is mod, path  # `from X import leaf`
        missing += [f"{path}.{n}" for n in provided if not hasattr(mod, n)]
    assert missing == []


def test_ops_modules_are_also_at_the_top_of_ipu_as_graphcore_exports_them():
    from tensorflow.python import ipu
    ops = [m.rsplit(".", 1)[1] for m, names in INVENTORY.items()
           if m.startswith("ipu.ops.") and m.count(".") == 2
           and any(r["provided"] for r in names.values())]
    assert "normalization_ops" in ops and "functional_ops" in ops
    for name in ops:
        assert getattr(ipu, name) is importlib.import_module("tensorflow.python.ipu.ops." + name)
    assert ipu.outlined_function is ipu.ops.functional_ops.outlined_function


def test_every_name_not_provided_is_in_the_coverage_document_with_its_reason():
    absent = []
    for module, names in INVENTORY.items():
        section = COVERAGE.split(f"\n## `{module}`\n", 1)[1].split("\n## ", 1)[0]
        for name, record in names.items():
            if record["provided"]:
                continue
            row = f"| `{name}` | {', '.join(record['lines'])} | no | {record['reason']} |"
            if not record["reason"] or row not in section:
                absent.append(f"{module}.{name}")
    assert absent == []


def test_counts_in_the_coverage_document_match_the_inventory():
    for line in ("2.6", "1.15"):
        records = [r for names in INVENTORY.values() for r in names.values() if line in r["lines"]]
        provided = sum(r["provided"] for r in records)
        assert f"TensorFlow {line} line: {provided} of {len(records)} names provided." in COVERAGE


# -- the import table (popdist_launcher/compat/import_table.py):
# every name both ways, and documented

def test_every_ipu_name_of_the_table_is_the_same_module_both_ways():
    import pkgutil

    import popdist_launcher.ipu as ours
    from popdist_launcher.compat import import_table as table
    from tensorflow.python import ipu
    children = {m.name for m in pkgutil.iter_modules(ours.__path__) if not m.name.startswith("_")}
    children |= {a.name.rpartition(".")[2] for a in table.ALIASES
                 if a.name.startswith(table.IPU + ".")}
    assert {"nn_ops", "cross_replica_optimizer", "config", "keras"} <= children
    for name in sorted(children):
        imported = importlib.import_module(f"{table.IPU}.{name}")
        assert getattr(ipu, name) is imported, name
        target = table.aliases_for(f"{table.IPU}.{name}", {"ipu-alias"})[0].target_of(
            f"{table.IPU}.{name}")
        assert imported is importlib.import_module(target), name
    for name, function in table.IPU_FUNCTIONS.items():
        module, _, attribute = function.partition(":")
        assert getattr(ipu, name) is getattr(importlib.import_module(module), attribute)
    for alias in table.ALIASES:  # keras.ipu, tensorflow.compiler.plugin ...
        if alias.graphcore and not alias.name.startswith(table.IPU):
            if alias.name.startswith("tf_keras") and importlib.util.find_spec("tf_keras") is None:
                continue  # TensorFlow 2.15: no tf-keras
            assert importlib.import_module(alias.name) is importlib.import_module(alias.target)


def _switches(when) -> str:
    return ", ".join(f"`{s}`" for s in when) or "always"


def import_table_rows() -> list:
    """The rows docs/ipu-api-coverage.md's "The import table" section has for the table."""
    from popdist_launcher.compat import import_table as table
    rows = []
    for a in table.ALIASES:
        tail = "[.X]" if a.children else ""
        if a.target is not None:
            what = f"`{a.target}{tail}`"
        elif a.make is not None:
            what = f"the module `{a.make}` makes"
        else:
            what = "ModuleNotFoundError with one sentence"
        where = "yes" if a.shadows else "no"
        rows.append(f"| `{a.name}{tail}` | {what} | {where} | {_switches(a.when)} |")
    for h in table.HOOKS:
        rows.append(f"| `{h.module}` | {'before' if h.before else 'after'}: `{h.function}` | "
                    f"{_switches(h.when)} |")
    return rows


def test_the_coverage_document_lists_the_import_table():
    section = COVERAGE.split("\n## The import table\n", 1)[1].split("\n## ", 1)[0]
    documented = [line for line in section.splitlines()
                  if line.startswith("| `") and "|---" not in line]
    assert documented == import_table_rows()
