"""``poprun-lite --check-build``: what this installation was built with, and what is missing.

The probing runs in a child interpreter so that a broken build (an ImportError, or a crash from
a Horovod built against another TensorFlow) is reported, not fatal.
"""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

FIX = "run `make setup` (or scripts/setup.sh) from the project root to install it"

_PROBE = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
out = {}
def probe(name, fn):
    try:
        out[name] = fn()
    except BaseException as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
def keras_2():
    from importlib import metadata
    try:
        return metadata.version("tf-keras")
    except metadata.PackageNotFoundError:
        return None
def tf():
    import tensorflow as tf
    return {"version": tf.__version__, "estimator": hasattr(tf, "estimator"),
            "keras": sys.modules[tf.keras.Model.__module__.split(".")[0]].__version__,
            "keras_2": keras_2(),
            "gpus": len(tf.config.list_physical_devices("GPU"))}
def hvd():
    import horovod
    import horovod.tensorflow as h
    return {"version": horovod.__version__, "tensorflow": True,
            "controllers": [n for n, f in (("mpi", h.mpi_built), ("gloo", h.gloo_built)) if f()],
            "tensor_operations": [n for n, f in (("nccl", h.nccl_built), ("ddl", h.ddl_built),
                                  ("ccl", h.ccl_built), ("mpi", h.mpi_built), ("gloo", h.gloo_built))
                                  if f()]}
def mpi4py():
    import mpi4py
    from mpi4py import MPI
    return {"version": mpi4py.__version__, "library": MPI.Get_library_version().splitlines()[0].strip()}
def grpc():
    import grpc
    return {"version": grpc.__version__}
for name, fn in (("tensorflow", tf), ("horovod", hvd), ("mpi4py", mpi4py), ("grpc", grpc)):
    probe(name, fn)
print(json.dumps(out))
"""


def probe() -> Dict[str, dict]:
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                            timeout=300)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        err = (result.stderr.strip().splitlines() or ["no output"])[-1]
        crashed = {"error": f"the probe interpreter exited with {result.returncode}: {err}"}
        return {k: crashed for k in ("tensorflow", "horovod", "mpi4py", "grpc")}
    return json.loads(lines[-1])


def _mpirun_version() -> Tuple[str, bool]:
    path = shutil.which("mpirun")
    if path is None:
        return "not found on PATH", False
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0], out.returncode == 0
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        return f"{path} failed: {exc}", False


def report() -> Tuple[List[str], List[str]]:
    """Lines to print, and the problems (empty when everything required is there)."""
    info = probe()
    lines = [f"Python        {platform.python_version()} ({sys.executable})"]
    problems: List[str] = []
    if not (3, 11) <= sys.version_info[:2] <= (3, 13):
        problems.append(f"Python {platform.python_version()} is not a supported one (3.11-3.13); "
                        f"create the virtualenv with python3.13, 3.12 or 3.11")

    def row(label: str, key: str, fmt) -> dict:
        entry = info.get(key, {})
        if "error" in entry:
            lines.append(f"{label:<13} MISSING ({entry['error']})")
            problems.append(f"{label} cannot be imported ({entry['error']}); {FIX}")
        else:
            lines.append(f"{label:<13} {fmt(entry)}")
        return entry

    tf = row("TensorFlow", "tensorflow",
             lambda e: f"{e['version']} (Keras {e['keras']}"
                       f"{'' if e['keras'].startswith('2.') else ', Keras 2: tf-keras ' + str(e['keras_2'])}"
                       f", tf.estimator: "
                       f"{'yes' if e['estimator'] else 'no'}, GPUs: {e['gpus']})")
    hvd = row("Horovod", "horovod",
              lambda e: f"{e['version']} [X] TensorFlow; controllers: "
                        f"{', '.join(e['controllers']) or 'none'}; tensor operations: "
                        f"{', '.join(e['tensor_operations']) or 'none'}")
    if "error" not in hvd:
        for needed in ("gloo", "mpi"):
            if needed not in hvd["controllers"]:
                problems.append(f"Horovod was built without the {needed} controller; rebuild it "
                                f"with HOROVOD_WITH_{needed.upper()}=1 ({FIX})")
    if "error" not in tf and not tf["estimator"]:
        problems.append("this TensorFlow has no tf.estimator; install tensorflow-estimator==2.15.0 "
                        "(with --no-deps on TensorFlow 2.16+, where popdist_launcher's site hook "
                        "makes it importable)")
    if "error" not in tf and not str(tf["keras"]).startswith("2.") and not tf["keras_2"]:
        problems.append(f"tf-keras is not installed, so IPU programs and Horovod's Keras API, "
                        f"which need Keras 2, cannot have it beside TensorFlow's Keras "
                        f"{tf['keras']}; install tf-keras ({FIX})")
    version, ok = _mpirun_version()
    lines.append(f"{'MPI':<13} {version}")
    if not ok:
        problems.append(f"mpirun is not usable ({version}); {FIX}")
    row("mpi4py", "mpi4py", lambda e: f"{e['version']} ({e['library']})")
    row("gRPC", "grpc", lambda e: e["version"])
    return lines, problems
