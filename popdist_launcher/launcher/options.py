"""The job's options as one validated, frozen value: what the command line asked for, with the
host layout it chose; the CLI builds it and the agent takes it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from popdist_launcher.launcher.output import OutputOptions
from popdist_launcher.launcher.topology import Layout


@dataclass(frozen=True)
class JobOptions:
    """Everything the job's attempts need; checked by the command line before it is built."""

    layout: Layout
    argv: Tuple[str, ...]
    num_instances: int
    num_replicas: Optional[int]
    ipus_per_replica: int
    exported_env: Tuple[Tuple[str, str], ...]
    start_timeout: float
    grace_period: float
    port_range: Optional[Tuple[int, int]]
    max_restarts: int
    timeout: Optional[float]
    output: OutputOptions
    placement: str = ""  # POPRUN_PLACEMENT's options (placement.encode)
    tf_config_mode: str = "auto"  # --tf-config (tf_config.AUTO)
    evaluator: bool = False  # --evaluator
