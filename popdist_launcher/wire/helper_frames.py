"""The frames between the launcher and its Horovod driver helper: one typed record per kind,
one JSON line each way (``{"kind": KIND, field: value, ...}``), one encode and one decode."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional, Union


# ---- from the launcher to the helper --------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Hosts:
    """The usable hosts, in rank order: [[name, slots], ...]."""
    KIND = "HOSTS"
    hosts: List[List[Any]]


@dataclasses.dataclass(frozen=True)
class Allow:
    """More addresses the rendezvous server answers."""
    KIND = "ALLOW"
    addresses: List[str]


@dataclasses.dataclass(frozen=True)
class Exited:
    """The end of one START's worker: its code, whom it blames ("none", "host", ...), how and
    what happened in words, and the job's progress mark then."""
    KIND = "EXITED"
    wid: int
    code: int
    blame: str
    how: str = ""
    what: str = ""
    mark: int = 0


# ---- from the helper to the launcher --------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Round:
    """A round formed: its number, its size and its hosts [[name, slots], ...]."""
    KIND = "ROUND"
    round: int
    size: int
    hosts: List[List[Any]]


@dataclasses.dataclass(frozen=True)
class Start:
    """Start worker ``wid`` of round ``round`` on ``hostname`` with Horovod's ranks."""
    KIND = "START"
    wid: int
    round: int
    hostname: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


@dataclasses.dataclass(frozen=True)
class Stop:
    """Stop worker ``wid``."""
    KIND = "STOP"
    wid: int


@dataclasses.dataclass(frozen=True)
class Blacklist:
    """``host`` is blacklisted for ``cooldown`` seconds (None: the rest of the job)."""
    KIND = "BLACKLIST"
    host: str
    cooldown: Optional[float]
    forever: bool
    limit: int


@dataclasses.dataclass(frozen=True)
class Retry:
    """Worker ``wid``'s slot on ``host`` is started again in place (the policy's sentence)."""
    KIND = "RETRY"
    host: str
    wid: int
    streak: int
    limit: int
    sentence: str


@dataclasses.dataclass(frozen=True)
class Fatal:
    """The job cannot go on (one sentence); DONE follows."""
    KIND = "FATAL"
    reason: str


@dataclasses.dataclass(frozen=True)
class Alive:
    """The helper's heartbeat, every HEARTBEAT_S."""
    KIND = "ALIVE"
    HEARTBEAT_S = 1.0


@dataclasses.dataclass(frozen=True)
class Done:
    """Horovod's driver ended: its error (None when it succeeded) and the workers' results."""
    KIND = "DONE"
    error: Optional[str]
    results: Dict[str, Any]


Frame = Union[Hosts, Allow, Exited, Round, Start, Stop, Blacklist, Retry, Fatal, Alive, Done]
TO_HELPER = (Hosts, Allow, Exited)  # what the launcher sends; the helper handles each
TO_LAUNCHER = (Round, Start, Stop, Blacklist, Retry, Fatal, Alive, Done)  # ... and the reverse
KINDS = {cls.KIND: cls for cls in (*TO_HELPER, *TO_LAUNCHER)}


def encode(frame: Frame) -> bytes:
    """One JSON line."""
    return (json.dumps({"kind": frame.KIND, **dataclasses.asdict(frame)}) + "\n").encode()


def decode(line: Union[bytes, str]) -> Frame:
    """The record of one JSON line; ValueError when it is no frame (not JSON, an unknown kind,
    a field missing or unknown)."""
    fields = json.loads(line)
    if not isinstance(fields, dict):
        raise ValueError(f"a frame is a JSON object, not {type(fields).__name__}")
    kind = fields.pop("kind", None)
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError("a frame of unknown kind")
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"a {cls.KIND} frame with other fields ({exc})") from None
