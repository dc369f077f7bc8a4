"""NumPy 1.x's names for IPU programs (popdist_launcher/numpy1_names.py): a program written for
Graphcore's SDK that uses ``np.Inf``, ``np.product``, ``np.float``, ``np.cast`` ... runs, each name
with NumPy 1.x's meaning, under poprun-lite and as one process with the same weights; the same
NumPy code in a program that names no Graphcore module sees NumPy as it is."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import poprun

PROGRAM = Path(__file__).parent / "programs" / "numpy1_names.py"

# What each type and constant is, by the NumPy 2 name the migration guide gives for it.
NUMPY2_NAME = {
    "Inf": "inf", "Infinity": "inf", "infty": "inf", "PINF": "inf", "NaN": "nan",
    "float_": "float64", "complex_": "complex128", "cfloat": "complex128",
    "singlecomplex": "complex64", "longfloat": "longdouble", "longcomplex": "clongdouble",
    "clongfloat": "clongdouble", "string_": "bytes_", "unicode_": "str_", "int0": "intp",
    "uint0": "uintp", "bool8": "bool_", "object0": "object_", "str0": "str_", "bytes0": "bytes_",
    "void0": "void"}
PYTHON_NAME = {"float": "float", "int": "int", "object": "object", "str": "str",
               "complex": "complex", "unicode": "str"}  # the aliases NumPy 1.24 removed
# NumPy 1.x's documented results of the functions the program calls.
CHECKS = {
    "product": 120, "cumproduct": [1, 2, 6], "round_": [0.0, 2.0, 2.0],
    "row_stack": [[1, 2], [3, 4]],
    "trapz": 4.0, "cast": "int8", "cast_values": [1, -2], "asfarray": "float32",
    "find_common_type": ["float64", "float32", "complex128"],
    "in1d": [False, True, True, False], "msort": [[1, 1], [3, 2]], "mat": "matrix",
    "issubclass_": [True, False], "safe_eval": [1, [2, "a"]],
    "fastCopyAndTranspose": [[1], [2], [3]], "sctype2char": "f", "obj2sctype": "float64",
    "issctype": [True, True, False], "issubsctype": True, "maximum_sctype": "int64",
    "nbytes": 2, "sctypes_int": ["int8", "int16", "int32", "int64"], "NZERO_sign": -1.0}


def described(value) -> str:
    return getattr(value, "__name__", None) or repr(value)


def check(result) -> None:
    names = result["names"]
    for name, numpy2 in NUMPY2_NAME.items():
        assert names[name] == described(getattr(np, numpy2)), name
    for name, python in PYTHON_NAME.items():
        assert names[name] == python, name
    assert (names["NINF"], names["PZERO"], names["NZERO"]) == ("-inf", "0.0", "-0.0")
    assert result["checks"] == CHECKS
    assert result["size"] == 96 and result["scale"] == 2.0 and result["finite"]
    assert result["epsilon"] == float(np.finfo(np.float64).eps)
    assert result["lowest"] == pytest.approx(-2.0, abs=1.5)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    result = subprocess.run([sys.executable, str(PROGRAM), str(out)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "numpy1-0.json").read_text())


def test_an_ipu_program_has_numpy_1_names_as_one_process(one_process):
    check(one_process)


@pytest.mark.slow
def test_an_ipu_program_has_numpy_1_names_under_poprun_lite(tmp_path, one_process):
    result = poprun("-np", "2", str(PROGRAM), str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = [json.loads((tmp_path / f"numpy1-{i}.json").read_text()) for i in range(2)]
    for run in runs:
        check(run)
        np.testing.assert_allclose(run["kernel"], one_process["kernel"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run["loss"], one_process["loss"], rtol=1e-5)
    assert runs[0]["kernel"] == runs[1]["kernel"]
    assert one_process["loss"][1] < one_process["loss"][0]


def test_a_program_without_graphcore_names_sees_numpy_as_it_is():
    from popdist_launcher.compat import numpy1_names
    names = numpy1_names.names()
    code = ("import json, numpy as np, tensorflow; "
            f"print(json.dumps([[n for n in {names!r} if hasattr(np, n)], "
            f"[n for n in {names!r} if n in vars(np)], "
            "getattr(np.__getattr__, 'numpy1_names', False)]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    answered, numpys_own, wrapped = json.loads(result.stdout.splitlines()[-1])
    assert wrapped is False  # NumPy's own __getattr__ (NumPy 1.26's answers its deprecated names)
    assert set(numpys_own) <= set(answered)
    assert not {"float", "int", "object", "str", "complex", "unicode"} & set(answered)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert answered == ["bool", "long"]  # NumPy 2's own types of those names


def test_every_name_the_module_answers_is_documented():
    from popdist_launcher.compat import numpy1_names
    coverage = (Path(__file__).resolve().parents[2] / "docs" / "ipu-api-coverage.md").read_text()
    section = coverage.split("\n## NumPy 1.x names\n", 1)[1].split("\n## ", 1)[0]
    assert [n for n in numpy1_names.names() if not re.search(rf"`np\.{n}[`(\[]", section)] == []
