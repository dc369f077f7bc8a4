"""An elastic job's options, checked into one ``ElasticOptions`` of values: horovodrun's rules for
--min-np/--max-np/-np and its other elastic options (``check_values``, before any host is read),
then the job's size from the hosts at start (``settle``). The agents lay each attempt out from
these values (``JobOptions.layout_on``)."""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.plan import PlanError

DEFAULT_ELASTIC_TIMEOUT = 600.0  # seconds, horovodrun's default
COOLDOWN_BOUNDS = (1, 3600)      # seconds, horovodrun's bounds for --blacklist-cooldown-range
DEFAULT_HOST_FAILURE_LIMIT = 3   # failures of one host in a row without progress
DISCOVERY_TIMEOUT = 10.0         # seconds one run of the discovery script may take
ELASTIC_ONLY = ("slots_per_host", "elastic_timeout", "reset_limit", "blacklist_cooldown_range",
                "host_failure_limit", "elastic_mode")


class ElasticOptions(NamedTuple):
    """An elastic job's settings (horovodrun's elastic options), as the command line checked
    them."""

    min_np: int
    max_np: Optional[int]  # None: every slot the hosts offer
    hosts: Tuple[Tuple[str, int], ...]  # the hosts at start (-H/--hostfile, or the script's)
    first_size: int  # instances of the first attempt: every slot at start, up to max_np
    discovery_script: Optional[str] = None
    slots_per_host: int = 1
    elastic_timeout: float = DEFAULT_ELASTIC_TIMEOUT
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[int, int]] = None
    mode: str = "restart"  # "horovod": Horovod's elastic driver; "restart": elastic restarts
    # --host-failure-limit: failures in a row without progress
    host_failure_limit: int = DEFAULT_HOST_FAILURE_LIMIT


def asked_for(p: Mapping[str, Any]) -> bool:
    """Whether the command line's values ``p`` ask for an elastic job."""
    return p["min_np"] is not None or p["max_np"] is not None or bool(p["host_discovery_script"])


def check_values(p: Mapping[str, Any]) -> None:
    """The elastic options' own values and their combinations with the rest (the command line's
    values ``p``, keyed as click gives them), before any host is read; PlanError says what is
    wrong in one sentence. Without an elastic job, elastic settings are refused."""
    for flag, value in (("--min-np", p["min_np"]), ("--max-np", p["max_np"])):
        if value is not None and value < 1:
            raise PlanError(f"{flag} must be at least 1 (got {value}).")
    if not asked_for(p):
        named = ["--" + name.replace("_", "-") for name in ELASTIC_ONLY
                 if p[name] is not None and not (name == "elastic_mode" and p[name] == "auto")]
        if named:
            one = len(named) == 1
            raise PlanError(f"{', '.join(named)} only {'applies' if one else 'apply'} to "
                            f"elastic jobs; add --min-np, --max-np or --host-discovery-script, "
                            f"or drop {'it' if one else 'them'}.")
        return
    min_np, max_np = p["min_np"], p["max_np"]
    if min_np is not None and max_np is not None and max_np < min_np:
        raise PlanError(f"--min-np {min_np} is above --max-np {max_np}: a job cannot need more "
                        f"instances than it may have; lower --min-np or raise --max-np.")
    if p["backend"] == "mpi":
        raise PlanError(
            "--min-np/--max-np/--host-discovery-script need Gloo: an MPI world is fixed "
            "when mpirun starts; use --backend ssh (or local on one host), or drop the "
            "elastic options.")
    if p["max_restarts"]:
        raise PlanError("--max-restarts is for fixed worlds; with --min-np/--max-np/"
                        "--host-discovery-script use --reset-limit.")
    if p["evaluator"]:
        raise PlanError("--evaluator needs a fixed cluster; drop it or the elastic options.")
    if p["slots_per_host"] is not None and p["slots_per_host"] < 1:
        raise PlanError(f"--slots-per-host must be at least 1 (got {p['slots_per_host']}).")
    if p["reset_limit"] is not None and p["reset_limit"] < 0:
        raise PlanError(f"--reset-limit must be 0 or more (got {p['reset_limit']}).")
    limit = p["host_failure_limit"]
    if limit is not None and limit < 1:
        raise PlanError(f"--host-failure-limit must be at least 1 (got {limit}): it counts a "
                        f"host's failures in a row without progress before the host is "
                        f"blacklisted or the job ends.")
    if p["blacklist_cooldown_range"] is not None:
        low, high = p["blacklist_cooldown_range"]
        if not COOLDOWN_BOUNDS[0] <= low <= high <= COOLDOWN_BOUNDS[1]:
            raise PlanError(f"--blacklist-cooldown-range {low} {high}: LOW must be at least "
                            f"{COOLDOWN_BOUNDS[0]} s, HIGH at most {COOLDOWN_BOUNDS[1]} s, and "
                            f"LOW at most HIGH; e.g. --blacklist-cooldown-range 10 100.")
    if p["host_discovery_script"] and (p["host"] or p["hostfile"]):
        raise PlanError(f"{'-H' if p['host'] else '--hostfile'} and --host-discovery-script "
                        f"both name hosts; give one of them.")


def slots_per_host(p: Mapping[str, Any]) -> int:
    """The slots of a host named without (--slots-per-host, 1 by default)."""
    return 1 if p["slots_per_host"] is None else p["slots_per_host"]


def settle(p: Mapping[str, Any], num_instances: int,
           named: Optional[Sequence[hostlib.HostSlots]], argv: Sequence[str]) -> ElasticOptions:
    """The ElasticOptions of values ``p`` that ``check_values`` passed, for -np
    ``num_instances`` on the hosts at start ``named`` (None: this host alone); PlanError when -np
    is outside --min-np .. --max-np or the hosts cannot hold it."""
    max_np, script = p["max_np"], p["host_discovery_script"]
    if named is None:  # this host alone, with a slot for every instance it may run
        hosts = [hostlib.HostSlots("localhost", max_np or num_instances)]
    elif script:  # its bare lines have --slots-per-host already
        hosts = list(named)
    else:
        hosts = [s if s.explicit else hostlib.HostSlots(s.name, slots_per_host(p))
                 for s in named]
    min_np = num_instances if p["min_np"] is None else p["min_np"]
    if num_instances < min_np or (max_np is not None and num_instances > max_np):
        upper = max_np if max_np is not None else "any"
        raise PlanError(f"-np {num_instances} is outside --min-np {min_np} .. --max-np {upper}; "
                        f"-np is the number of instances to wait for at start.")
    total = sum(s.slots for s in hosts)
    if total < num_instances and not p["oversubscribe"]:
        where = "the host discovery script's hosts offer" if script else "the hosts offer"
        raise PlanError(f"{where} {total} slot(s) and -np {num_instances} instances are needed "
                        f"to start; add hosts or slots, or lower -np (and --min-np).")
    first = min(max_np, total) if max_np is not None else total
    mode = p["elastic_mode"]
    if mode == "auto":
        from popdist_launcher.launcher.elastic import kind  # reads the program's source
        mode = kind.detect(argv)
    timeout, limit = p["elastic_timeout"], p["host_failure_limit"]
    return ElasticOptions(
        min_np=min_np, max_np=max_np, hosts=tuple((s.name, s.slots) for s in hosts),
        first_size=max(first, num_instances), discovery_script=script,
        slots_per_host=slots_per_host(p),
        elastic_timeout=DEFAULT_ELASTIC_TIMEOUT if timeout is None else timeout,
        reset_limit=p["reset_limit"], cooldown_range=p["blacklist_cooldown_range"], mode=mode,
        host_failure_limit=DEFAULT_HOST_FAILURE_LIMIT if limit is None else limit)
