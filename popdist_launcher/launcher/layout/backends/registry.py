"""Every backend, in one list: what ``--backend`` accepts, which one ``--backend auto`` means
(``pick_backend``) and the backend built for a layout (``build``). A new backend is one module
in this folder and one line in ``REGISTRY``."""
from __future__ import annotations

from typing import Sequence, Tuple, Type

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.backends.base import Backend, HostOptions, Situation
from popdist_launcher.launcher.layout.backends.local import LocalBackend
from popdist_launcher.launcher.layout.backends.mpi import MpiBackend
from popdist_launcher.launcher.layout.backends.slurm import SlurmBackend
from popdist_launcher.launcher.layout.backends.ssh import SshBackend
from popdist_launcher.launcher.layout.remote import SshOptions

# In the order --backend lists them; --backend auto asks them by their ``auto_rank``.
REGISTRY: Tuple[Type[Backend], ...] = (LocalBackend, SshBackend, MpiBackend, SlurmBackend)

BACKENDS = ("auto",) + tuple(backend.option for backend in REGISTRY)


def named(option: str) -> Type[Backend]:
    """The backend whose --backend value is ``option``."""
    return next(backend for backend in REGISTRY if backend.option == option)


def pick_backend(requested: str, *, in_allocation: bool, all_local: bool, num_instances: int,
                 mpi_agent: bool, fixed_world: bool = True) -> str:
    """The backend that starts the instances: ``requested`` unless it is ``auto``, which means
    the first available by rank: slurm for a Slurm allocation's hosts; for other hosts mpirun
    when MPI's remote-shell agent is set (a Kubernetes MPIJob: it may not be ssh and may not
    carry stdin), else ssh; on this host alone mpirun when there are 2+ instances and Horovod
    can use it, else local. An elastic job (not ``fixed_world``) never gets mpirun: its world
    changes."""
    if requested != "auto":
        return requested
    situation = Situation(in_allocation, all_local, num_instances, mpi_agent, fixed_world)
    return next(backend.option for backend in sorted(REGISTRY, key=lambda b: b.auto_rank)
                if backend.available(situation))


def build(option: str, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
          options: HostOptions) -> Tuple[Backend, SshOptions]:
    """The backend ``option`` for ``counts`` instances on ``slots``, and the layout's ssh
    options (MPI's remote-shell agent only where the backend takes it: ssh and the host probes
    use plain ssh); EngineError says why it cannot be."""
    backend = named(option)
    ssh = options.ssh if backend.takes_mpi_agent else options.ssh._replace(agent=())
    return backend.build(slots, counts, options, ssh), ssh
