"""The engine interface: how a backend gets every instance's wrapper started, whether
``--backend auto`` may choose it (``available``, from a job's ``Situation``) and how it is built
from the layout's hosts and options (``build``, from ``HostOptions``).

A backend only places processes: it returns :class:`Launch` items, each either a wrapper the
launcher forks on its own host, or one engine process (mpirun, srun, an ssh client) that starts
wrappers for some instances. Whatever starts them, every wrapper connects back to the launcher,
which supervises all instances the same way (see ``launcher/supervision/supervisor.py``).
"""
from __future__ import annotations

import abc
import os
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.launcher.layout.remote import SshOptions

# The wrapper's command. ``-c`` rather than ``-m``: runpy's imports would cost every wrapper ~3 ms.
WRAPPER_CODE = ("import os, sys; {}from popdist_launcher.launcher.spawned.instance import main; "
                "code = main(); sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")
# Where this popdist_launcher is: wrappers on this host find it there without the site module
# (the wrapper needs the standard library only; site's .pth files cost every wrapper ~2 ms).
# (five folders up from popdist_launcher/launcher/layout/backends/base.py).
PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))


class Wiring(NamedTuple):
    """Where wrappers find the launcher: its Unix socket (this host) and TCP address (others)."""

    unix_path: str
    tcp_address: Optional[Tuple[str, int]]
    start_timeout: float

    def addresses(self, unix: bool = True) -> List[str]:
        """Where a wrapper looks for the launcher, in the order it tries them. TCP (there only
        when some wrapper may run on another host) comes first: a Unix socket's path can be
        reachable from another host too (hosts that share a filesystem, as network namespaces
        or containers on one machine), and such a connection would outlive that host's
        network, hiding its loss from the connection's keepalive."""
        tcp = [] if self.tcp_address is None else \
            [f"tcp:{self.tcp_address[0]}:{self.tcp_address[1]}"]
        return tcp + ([f"unix:{self.unix_path}"] if unix else [])

    def wrapper_argv(self, *how: str, unix: bool = True, local: bool = False) -> List[str]:
        """The command that starts a wrapper; ``how`` says which instance it is. With ``local``
        (the wrapper runs on this host) it skips the site module and the current directory."""
        python = [sys.executable, "-S", "-P", "-c",
                  WRAPPER_CODE.format(f"sys.path.append({PACKAGE_HOME!r}); ")] if local else \
            [sys.executable, "-c", WRAPPER_CODE.format("")]
        return python + ["--connect", ",".join(self.addresses(unix)),
                         "--timeout", f"{self.start_timeout:g}", *how]


class Launch(NamedTuple):
    """One thing the launcher starts: a forked wrapper (``argv`` None) or an engine process."""

    label: str
    instances: Tuple[int, ...]
    argv: Optional[Tuple[str, ...]] = None
    env: Optional[Dict[str, str]] = None  # the engine's whole environment (None: the launcher's)
    stdin: bytes = b""  # written to the engine's stdin, which is then closed (ssh: the secret)
    # A private folder for the engine's own files on this host (mpirun's session directories):
    # made before the engine starts, removed with everything in it when the attempt ends.
    scratch: Optional[str] = None


class EngineError(ValueError):
    """The engine is missing or its options cannot work; one sentence for the user."""


class HostOptions(NamedTuple):
    """The host and backend options every layout of a job is computed from: the first
    attempt's, and an elastic job's for the hosts it has at each re-layout."""

    backend: str = "auto"  # as the command line asked: auto, or a backend's ``option``
    in_allocation: bool = False  # the hosts are a Slurm allocation's (no option named them)
    oversubscribe: bool = False
    subnet: Optional[str] = None
    iface: Optional[str] = None
    ssh: SshOptions = SshOptions()
    mpi_global_args: str = ""
    mpi_local_args: str = ""
    instance_mpi_local_args: Tuple[Tuple[int, str], ...] = ()


class Situation(NamedTuple):
    """What ``--backend auto`` chooses from: the job and the hosts it was laid out on."""

    in_allocation: bool  # the hosts are a Slurm allocation's
    all_local: bool  # every instance runs on the launcher's host
    num_instances: int
    mpi_agent: bool  # MPI's remote-shell agent is set (a Kubernetes MPIJob)
    fixed_world: bool  # not an elastic job (its world changes: never mpirun)


class Backend(abc.ABC):
    """One way of placing instances: local (fork), ssh, mpirun, srun. A backend module defines
    one subclass and ``registry.py`` lists it."""

    name: str = ""  # how messages name it (the engine's name)
    option: str = ""  # its --backend value
    # --backend auto asks the backends from the lowest rank up and takes the first available.
    auto_rank: int = 0
    controller: str = "gloo"  # Horovod's controller its instances use
    # Whether it keeps MPI's remote-shell agent in the layout's ssh options (else plain ssh).
    takes_mpi_agent: bool = False
    # An engine's own start-up failures that have nothing to do with the job: started once more.
    start_transients: Sequence[str] = ()
    # Lines of the engine's own output that say nothing about the job (a race the engine
    # reports and recovers from): kept in its log, never on the console.
    engine_noise: Sequence[str] = ()

    @abc.abstractmethod
    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        """What to start so that every instance of ``plan`` gets a wrapper."""

    def launch_one(self, index: int, host: Host, wiring: Wiring, secret: str) -> Launch:
        """What starts instance ``index`` alone on ``host`` while the job runs (an elastic
        worker); backends that start a fixed world at once (mpirun) cannot."""
        raise NotImplementedError(f"the {self.name} backend starts a fixed world")

    def explain_engine_exit(self, launch: Launch, returncode: int) -> Optional[str]:
        """A reading of an engine's exit status (e.g. ssh's 255), or None for the plain one."""
        return None

    @classmethod
    def available(cls, situation: Situation) -> bool:
        """Whether ``--backend auto`` may choose this backend in ``situation`` (never, unless
        the backend says when)."""
        return False

    @classmethod
    def build(cls, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
              options: HostOptions, ssh: SshOptions) -> "Backend":
        """The backend for ``counts`` instances on the hosts ``slots`` with ``options``
        (``ssh``: the layout's ssh options); EngineError says why it cannot be. Every backend
        in the registry defines it."""
        raise NotImplementedError(f"the {cls.name} backend is not built from a layout")
