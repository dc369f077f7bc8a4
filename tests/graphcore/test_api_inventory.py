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
