"""Hosts and slots: ``-H a:2,b:2``, ranges like ``node[0-3]``, hostfiles, and how instances are
spread over them. Pure functions on strings and numbers: nothing here touches the network.
"""
from __future__ import annotations

import re
import socket
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "localhost.localdomain")
# Compiled on first use (re caches them), off the start-up path of jobs that name no hosts.
_RANGE = r"\[([^\[\]]*)\]"
_NAME = r"^[A-Za-z0-9_.:\-]+$"
MAX_HOSTS = 65536  # names one -H value, hostfile or range may expand to
MAX_HOSTFILE_BYTES = 1 << 20


SLURM_ALLOCATION = "the Slurm allocation"  # what named the hosts that slurm_hosts returns


class HostError(ValueError):
    """A host list, hostfile or allocation the user must fix; the message says how."""


class HostSlots(NamedTuple):
    name: str
    slots: int
    explicit: bool = True  # False: the host was named without slots (``-H a,b``, a plain line)


def expand_names(pattern: str) -> List[str]:
    """``node[0-3]`` -> node0..node3; ``n[01-03,7]`` keeps the zero padding; nested groups
    multiply."""
    match = re.search(_RANGE, pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise HostError(f"host {pattern!r} has an unbalanced bracket; write ranges as "
                            f"name[0-3] or name[1,4-6].")
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    names = []
    for part in match.group(1).split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise HostError(f"host range [{match.group(1)}] in {pattern!r} is not a list of "
                            f"numbers or LOW-HIGH ranges, e.g. node[0-3] or node[1,4-6].")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise HostError(f"host range {part.strip()!r} in {pattern!r} runs backwards; write "
                            f"it as {last}-{first}.")
        if len(names) + last - first + 1 > MAX_HOSTS:
            raise HostError(f"host range [{match.group(1)}] in {pattern!r} names more than "
                            f"{MAX_HOSTS} hosts; check the range's bounds.")
        width = len(low) if low.startswith("0") else 0
        names.extend(f"{head}{n:0{width}d}" for n in range(first, last + 1))
    expanded = []
    for n in names:
        expanded.extend(expand_names(n + tail))
        if len(expanded) > MAX_HOSTS:
            raise HostError(f"{pattern!r} names more than {MAX_HOSTS} hosts; check its ranges.")
    return expanded


def _split_top_level(spec: str, what: str = "-H") -> List[str]:
    """Split on commas that are not inside a [range]; an empty item is an error (a typo)."""
    parts, depth, current = [], 0, []
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    parts = [p.strip() for p in parts]
    if any(parts) and not all(parts):
        raise HostError(f"{what} {spec!r} has an empty entry between commas; remove the extra "
                        f"comma, e.g. -H hostA:2,hostB:2.")
    return [p for p in parts if p]


def _parse_slots(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise HostError(f"{where}: slots must be a whole number of at least 1, got {text!r}.")
    return int(text)


def parse_host_list(spec: str) -> List[HostSlots]:
    """``-H``'s value: comma-separated ``NAME[:SLOTS]``; NAME may hold ranges. No slots means 1."""
    hosts = []
    for item in _split_top_level(spec):
        name, slots, explicit = item, 1, False
        # The last colon separates slots, unless the name is an IPv6 address in brackets.
        if ":" in item and not item.endswith("]"):
            head, _, tail = item.rpartition(":")
            if tail.isdigit() or not _looks_ipv6(item):
                name, slots, explicit = head, _parse_slots(tail, f"-H {item!r}"), True
        for expanded in expand_names(name):
            hosts.append(HostSlots(_check_name(expanded, f"-H {spec!r}"), slots, explicit))
        _check_count(hosts, f"-H {spec[:60]!r}")
    if not hosts:
        raise HostError(f"-H {spec!r} names no host; expected e.g. -H hostA:2,hostB:2.")
    return _merge(hosts)


def read_hostfile(path: str) -> str:
    """The text of a hostfile; a file that is unreadable, binary or over 1 MiB is a HostError."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_HOSTFILE_BYTES + 1)
    except OSError as exc:
        raise HostError(f"{path!r} cannot be read ({exc.strerror}); give the path of a file "
                        f"of 'HOSTNAME slots=N' lines.") from None
    if len(data) > MAX_HOSTFILE_BYTES:
        raise HostError(f"{path!r} is larger than {MAX_HOSTFILE_BYTES >> 20} MiB, so "
                        f"not a hostfile; give a file of 'HOSTNAME slots=N' lines.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise HostError(f"{path!r} is not a text file; give a file of "
                        f"'HOSTNAME slots=N' lines (one host per line).")
    return text


def parse_hostfile(text: str, path: str = "hostfile") -> List[HostSlots]:
    """Open MPI's hostfile format: ``NAME [slots=N] [max_slots=M]`` per line, ``#`` comments; a
    plain list of names (PopRun's hostfile) is the same format without slots."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        slots, explicit = 1, False
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if key == "slots" and sep:
                slots, explicit = _parse_slots(value, f"{path} line {number}"), True
            elif key == "max_slots" and sep:
                _parse_slots(value, f"{path} line {number}")
            else:
                raise HostError(f"{path} line {number}: {field!r} is not understood; expected "
                                f"'HOSTNAME slots=N' (and optionally max_slots=M).")
        for expanded in expand_names(fields[0]):
            hosts.append(HostSlots(_check_name(expanded, f"{path} line {number}"), slots,
                                   explicit))
        _check_count(hosts, path)
    if not hosts:
        raise HostError(f"{path} lists no host; write one 'HOSTNAME slots=N' line per host.")
    return _merge(hosts)


def _check_count(hosts: List[HostSlots], where: str) -> None:
    if len(hosts) > MAX_HOSTS:
        raise HostError(f"{where} names more than {MAX_HOSTS} hosts; check its ranges.")


def _looks_ipv6(text: str) -> bool:
    return text.count(":") > 1


def _check_name(name: str, where: str) -> str:
    if not re.match(_NAME, name):
        raise HostError(f"{where}: {name!r} is not a host name or address; use letters, digits, "
                        f"'.', '-' and '_'.")
    return name


def _merge(hosts: Iterable[HostSlots]) -> List[HostSlots]:
    """A host named twice gets the sum of its slots, at its first position (slots count as given
    if any mention gave them)."""
    merged: Dict[str, int] = {}
    explicit: Dict[str, bool] = {}
    for host in hosts:
        merged[host.name] = merged.get(host.name, 0) + host.slots
        explicit[host.name] = explicit.get(host.name, False) or host.explicit
    return [HostSlots(name, slots, explicit[name]) for name, slots in merged.items()]


def default_instances(hosts: Sequence[HostSlots]) -> int:
    """Instances when -np is not given: one per slot (mpirun), one per host named without slots."""
    return sum(h.slots for h in hosts)


def spread_evenly(hosts: Sequence[HostSlots]) -> bool:
    """Whether no host was given slots: then instances are divided evenly among the hosts, as
    PopRun does (``-np 4 -H a,b`` runs 2 on each), instead of one slot per host as mpirun."""
    return not any(h.explicit for h in hosts)


def allocate(num_instances: int, hosts: Sequence[HostSlots], oversubscribe: bool = False,
             source: str = "-H") -> List[int]:
    """How many instances each host runs: as even as the slots allow, earlier hosts first.

    More instances than slots is an error unless ``oversubscribe``, when the excess is spread
    evenly too. Hosts that get no instance get 0 (e.g. -np 2 on three hosts). Hosts all named
    without slots take any number of instances, divided evenly (earlier hosts get the extra).
    """
    if spread_evenly(hosts):
        per_host, extra = divmod(num_instances, len(hosts))
        return [per_host + (1 if i < extra else 0) for i in range(len(hosts))]
    total = sum(h.slots for h in hosts)
    if num_instances > total and not oversubscribe:
        listed = ",".join(f"{h.name}:{h.slots}" for h in hosts)
        raise HostError(
            f"{num_instances} instances need {num_instances} slots but {source} gives {total} "
            f"({listed}); add hosts or slots (NAME:SLOTS), lower -np, or pass --oversubscribe.")
    import heapq
    counts = [0] * len(hosts)
    # Each instance goes to the host with the fewest so far (the first such), among those with
    # a free slot while there is one, then among all hosts.
    free = [(0, i) for i in range(len(hosts))]
    for _ in range(min(num_instances, total)):
        _, i = heapq.heappop(free)
        counts[i] += 1
        if counts[i] < hosts[i].slots:
            heapq.heappush(free, (counts[i], i))
    everyone = [(n, i) for i, n in enumerate(counts)]
    heapq.heapify(everyone)
    for _ in range(num_instances - min(num_instances, total)):
        _, i = heapq.heappop(everyone)
        counts[i] += 1
        heapq.heappush(everyone, (counts[i], i))
    return counts


def is_local(name: str) -> bool:
    """Whether NAME is this machine by name (no DNS lookups: launching must stay fast)."""
    if name in LOCAL_NAMES or name.startswith("127."):
        return True
    own = socket.gethostname()
    return name == own or name.split(".")[0] == own.split(".")[0] and "." in name


def used_hosts(hosts: Sequence[HostSlots], counts: Sequence[int]) -> List[Tuple[HostSlots, int]]:
    """The hosts that get instances, each with its count (hosts given 0 are left out)."""
    return [(h, n) for h, n in zip(hosts, counts) if n]


def host_text(hosts: Sequence[Tuple[str, int]], sep: str = ", ") -> str:
    """(name, number) pairs as "name:number" joined by ``sep`` ("" for none)."""
    return sep.join(f"{name}:{number}" for name, number in hosts)


def describe(hosts: Sequence[HostSlots], counts: Optional[Sequence[int]] = None) -> str:
    if counts is None:
        return ",".join(f"{h.name}:{h.slots}" if h.explicit else h.name for h in hosts)
    return ", ".join(f"{h.name} ({n} of {h.slots} slots)" if h.explicit else f"{h.name} ({n})"
                     for h, n in zip(hosts, counts))


def parse_tasks_per_node(value: str) -> List[int]:
    """Slurm's SLURM_TASKS_PER_NODE, e.g. ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: List[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise HostError(f"SLURM_TASKS_PER_NODE={value!r} is not understood; expected e.g. "
                            f"2(x3),1.")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def slurm_hosts(environ: Dict[str, str]) -> Tuple[List[HostSlots], str]:
    """The allocation's hosts and slots from SLURM_* variables (inside salloc/sbatch)."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise HostError("the slurm backend needs a Slurm allocation (SLURM_JOB_NODELIST is not "
                        "set); run poprun-lite inside salloc or an sbatch script.")
    names = [n for item in _split_top_level(nodelist, "SLURM_JOB_NODELIST")
             for n in expand_names(item)]
    per_node = environ.get("SLURM_TASKS_PER_NODE")
    counts = parse_tasks_per_node(per_node) if per_node else [1] * len(names)
    if len(counts) != len(names):
        counts = (counts + [counts[-1]] * len(names))[:len(names)]
    return [HostSlots(n, c) for n, c in zip(names, counts)], SLURM_ALLOCATION
