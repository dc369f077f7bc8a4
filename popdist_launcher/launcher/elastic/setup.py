"""An elastic job's options checked into one ``ElasticOptions``: horovodrun's rules for
--min-np/--max-np/-np, the hosts at start (the discovery script's first answer, or -H/--hostfile),
the backend (never mpirun: its world is fixed) and the elastic mode."""
from __future__ import annotations

import os
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher import hosts as hostlib
from popdist_launcher.launcher.backends.detect import in_slurm_allocation
from popdist_launcher.launcher import discovery_script
from popdist_launcher.launcher.elastic import kind
from popdist_launcher.launcher.plan import PlanError
from popdist_launcher.launcher.topology import Layout, TopologyError

DEFAULT_ELASTIC_TIMEOUT = 600.0  # seconds, horovodrun's default
COOLDOWN_BOUNDS = (1, 3600)      # seconds, horovodrun's bounds for --blacklist-cooldown-range
DEFAULT_HOST_FAILURE_LIMIT = 3   # failures of one host in a row without progress
DISCOVERY_TIMEOUT = 10.0         # seconds one run of the discovery script may take

Choose = Callable[[int, Sequence[hostlib.HostSlots], str], Layout]


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
    elastic_timeout: float = DEFAULT_ELASTIC_TIMEOUT
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[int, int]] = None
    mode: str = "restart"  # "horovod": Horovod's elastic driver; "restart": elastic restarts
    host_failure_limit: int = DEFAULT_HOST_FAILURE_LIMIT  # --host-failure-limit: failures in a row without progress


def check(num_instances: int, min_np: Optional[int], max_np: Optional[int],
          script: Optional[str], slots_per_host: Optional[int],
          elastic_timeout: Optional[float], reset_limit: Optional[int],
          cooldown_range: Optional[Tuple[int, int]], mode: str,
          host_failure_limit: Optional[int], argv: Sequence[str], *,
          host: Optional[str], hostfile: Optional[str], oversubscribe: bool, backend: str,
          start_timeout: float, choose: Choose) -> ElasticOptions:
    """Raises PlanError (one sentence) for anything an elastic job cannot run with."""
    min_np = num_instances if min_np is None else min_np
    if max_np is not None and max_np < min_np:
        raise PlanError(f"--min-np {min_np} is above --max-np {max_np}: a job cannot need more "
                        f"instances than it may have; lower --min-np or raise --max-np.")
    if num_instances < min_np or (max_np is not None and num_instances > max_np):
        upper = max_np if max_np is not None else "any"
        raise PlanError(f"-np {num_instances} is outside --min-np {min_np} .. --max-np {upper}; "
                        f"-np is the number of instances to wait for at start.")
    slots_per_host = 1 if slots_per_host is None else slots_per_host
    if slots_per_host < 1:
        raise PlanError(f"--slots-per-host must be at least 1 (got {slots_per_host}).")
    if reset_limit is not None and reset_limit < 0:
        raise PlanError(f"--reset-limit must be 0 or more (got {reset_limit}).")
    if host_failure_limit is not None and host_failure_limit < 1:
        raise PlanError(f"--host-failure-limit must be at least 1 (got {host_failure_limit}): "
                        f"it counts a host's failures in a row without progress before the "
                        f"host is blacklisted or the job ends.")
    if cooldown_range is not None:
        low, high = cooldown_range
        if not COOLDOWN_BOUNDS[0] <= low <= high <= COOLDOWN_BOUNDS[1]:
            raise PlanError(f"--blacklist-cooldown-range {low} {high}: LOW must be at least "
                            f"{COOLDOWN_BOUNDS[0]} s, HIGH at most {COOLDOWN_BOUNDS[1]} s, and "
                            f"LOW at most HIGH; e.g. --blacklist-cooldown-range 10 100.")
    if script and (host or hostfile):
        raise PlanError(f"{'-H' if host else '--hostfile'} and --host-discovery-script both name "
                        f"hosts; give one of them.")
    in_slurm = in_slurm_allocation(os.environ)
    allocation = not (script or host or hostfile) and (
        backend == "slurm" or backend == "auto" and in_slurm)
    slots = _hosts_at_start(script, slots_per_host, host, hostfile, max_np or num_instances,
                            min(DISCOVERY_TIMEOUT, start_timeout), allocation)
    total = sum(s.slots for s in slots)
    if total < num_instances and not oversubscribe:
        where = "the host discovery script's hosts offer" if script else "the hosts offer"
        raise PlanError(f"{where} {total} slot(s) and -np {num_instances} instances are needed "
                        f"to start; add hosts or slots, or lower -np (and --min-np).")
    first = min(max_np, total) if max_np is not None else total
    first = max(first, num_instances)

    def relayout(hosts: Sequence[Tuple[str, int]], n: int) -> Layout:
        chosen = [hostlib.HostSlots(name, count) for name, count in hosts]
        engine = backend
        if backend == "auto":
            engine = "slurm" if allocation else \
                "local" if all(hostlib.is_local(s.name) for s in chosen) else "ssh"
        try:
            return choose(n, chosen, engine)
        except TopologyError as exc:
            raise PlanError(str(exc)) from None

    if mode == "auto":
        mode = kind.detect(argv)
    return ElasticOptions(
        min_np=min_np, max_np=max_np, hosts=tuple((s.name, s.slots) for s in slots),
        relayout=relayout, first_size=first, discovery_script=script,
        slots_per_host=slots_per_host,
        elastic_timeout=DEFAULT_ELASTIC_TIMEOUT if elastic_timeout is None else elastic_timeout,
        reset_limit=reset_limit, cooldown_range=cooldown_range, mode=mode,
        host_failure_limit=DEFAULT_HOST_FAILURE_LIMIT if host_failure_limit is None
        else host_failure_limit)


def _hosts_at_start(script: Optional[str], slots_per_host: int, host: Optional[str],
                    hostfile: Optional[str], local_slots: int, timeout: float,
                    allocation: bool) -> List[hostlib.HostSlots]:
    """The hosts at start: the script's, -H/--hostfile's, the Slurm allocation's, or this host
    alone with ``local_slots``."""
    if script:
        try:
            found = discovery_script.run_discovery(script, slots_per_host, timeout)
        except discovery_script.DiscoveryError as exc:
            raise PlanError(str(exc)) from None
        return [hostlib.HostSlots(name, count) for name, count in found]
    try:
        if host:
            named = hostlib.parse_host_list(host)
        elif hostfile:
            named = hostlib.parse_hostfile(hostlib.read_hostfile(hostfile), hostfile)
        elif allocation:
            named = hostlib.slurm_hosts(dict(os.environ))[0]
        else:
            return [hostlib.HostSlots("localhost", local_slots)]
    except hostlib.HostError as exc:
        raise PlanError(str(exc)) from None
    return [s if s.explicit else hostlib.HostSlots(s.name, slots_per_host) for s in named]
