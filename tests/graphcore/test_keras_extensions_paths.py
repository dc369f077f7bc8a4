"""The Keras extensions' modules keep their import paths after moving into the IPU runtime:
``tensorflow.python.ipu.keras.extensions.extensions_base`` and ``.data_adapter`` (Graphcore's
module names there) and every module under ``popdist_launcher.ipu.keras.extensions`` import as
the one module of ``popdist_launcher.ipu_runtime.keras``. Checked in a fresh process, as a
program imports them."""
import json
import subprocess
import sys

from popdist_launcher.compat.import_table import IPU_KERAS_EXTENSIONS

PROGRAM = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    runtime = importlib.import_module("popdist_launcher.ipu_runtime.keras." + name)
    for prefix in ("tensorflow.python.ipu", "popdist_launcher.ipu"):
        path = prefix + ".keras.extensions." + name
        found[path] = importlib.import_module(path) is runtime
print(json.dumps(found))
"""


def test_the_extensions_modules_import_under_graphcores_and_our_paths():
    done = subprocess.run([sys.executable, "-c", PROGRAM, *IPU_KERAS_EXTENSIONS],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == 2 * len(IPU_KERAS_EXTENSIONS)
    assert "tensorflow.python.ipu.keras.extensions.extensions_base" in found
    assert "tensorflow.python.ipu.keras.extensions.data_adapter" in found
    assert all(found.values()), found
