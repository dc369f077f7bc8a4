"""The job's options as one validated, frozen value: what the command line asked for, with the
host layout it chose; the CLI builds it and the agent takes it. Named tuples, not frozen
dataclasses: on every job's start-up path, where dataclasses would cost ~2 ms."""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.output import OutputOptions
from popdist_launcher.launcher.topology import Layout


class JobOptions(NamedTuple):
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
    elastic: Optional["ElasticOptions"] = None  # --min-np, --max-np, --host-discovery-script


class ElasticOptions(NamedTuple):
    """An elastic job's settings (horovodrun's elastic options), as the command line checked
    them; ``relayout(hosts, n)`` lays ``n`` instances out on ``hosts`` ((name, slots) pairs) with
    the job's backend and host options."""

    min_np: int
    max_np: Optional[int]  # None: every slot the hosts offer
    hosts: Tuple[Tuple[str, int], ...]  # the hosts at start (-H/--hostfile, or the script's)
    relayout: Callable[[Sequence[Tuple[str, int]], int], Layout]
    first_size: int  # instances of the first attempt: every slot at start, up to max_np
    discovery_script: Optional[str] = None
    slots_per_host: int = 1
    elastic_timeout: float = 600.0
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[int, int]] = None
    mode: str = "restart"  # "horovod": Horovod's elastic driver; "restart": elastic restarts
