"""Slurm's ``srun`` places the wrappers (one task each) as a job step in the current allocation;
the launcher supervises every instance through its wrapper, as on any backend. Each task's
wrapper finds its instance by ``SLURM_PROCID``."""
from __future__ import annotations

import os
import shlex
from typing import List, Sequence

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.backends.base import (Backend, EngineError, HostOptions,
                                                             Launch, Situation, Wiring)
from popdist_launcher.wire import placement_text as placement
from popdist_launcher.wire.protocol import SECRET_ENV
from popdist_launcher.launcher.layout.executables import which
from popdist_launcher.launcher.layout.plan import Host, LaunchPlan
from popdist_launcher.launcher.layout.remote import SshOptions


class SlurmBackend(Backend):
    """``srun`` inside a Slurm allocation: one job step, block distribution."""

    name = "srun"
    option = "slurm"
    auto_rank = 0

    def __init__(self, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
                 global_args: Sequence[str] = (), local_args: Sequence[str] = ()) -> None:
        self.slots = list(slots)
        self.counts = list(counts)
        self.srun = which("srun")
        if self.srun is None:
            raise EngineError("--backend slurm needs Slurm's srun on PATH; run inside a Slurm "
                              "allocation on a node with Slurm installed, or use --backend ssh.")
        self.global_args = list(global_args)
        self.local_args = list(local_args)

    @classmethod
    def available(cls, situation: Situation) -> bool:
        return situation.in_allocation

    @classmethod
    def build(cls, slots: Sequence[hostlib.HostSlots], counts: Sequence[int],
              options: HostOptions, ssh: SshOptions) -> "SlurmBackend":
        return cls(slots, counts, shlex.split(options.mpi_global_args),
                   shlex.split(options.mpi_local_args))

    def command(self, plan: LaunchPlan, wiring: Wiring) -> List[str]:
        used = hostlib.used_hosts(self.slots, self.counts)
        argv = [self.srun, f"--ntasks={plan.num_instances}", f"--nodes={len(used)}",
                f"--nodelist={','.join(h.name for h, _ in used)}", "--distribution=block",
                "--kill-on-bad-exit=1", "--overlap"]
        if placement.decode(plan.placement).get("bind", "none") != "none":
            argv.append("--cpu-bind=none")  # each wrapper binds its instance (--bind-to)
        return argv + self.global_args + self.local_args + wiring.wrapper_argv(
            "--rank-from", "SLURM_PROCID")

    def launch_one(self, index: int, host: Host, wiring: Wiring, secret: str) -> Launch:
        """One task on ``host`` as its own job step, beside the steps already running."""
        argv = [self.srun, "--ntasks=1", "--nodes=1", f"--nodelist={host.name}", "--overlap",
                "--kill-on-bad-exit=1"] + self.global_args + self.local_args + \
            wiring.wrapper_argv("--index", str(index))
        return Launch(f"srun {host.name}", (index,), tuple(argv),
                      {**os.environ, SECRET_ENV: secret})

    def launches(self, plan: LaunchPlan, wiring: Wiring, secret: str) -> List[Launch]:
        env = dict(os.environ)
        env[SECRET_ENV] = secret
        return [Launch(self.name, tuple(range(plan.num_instances)),
                       tuple(self.command(plan, wiring)), env)]
