"""The Horovod driver helper's settings, as the launcher passes them on its command line: each
key and its default written once, one JSON encode and one strict decode."""
from __future__ import annotations

import dataclasses
import json
from typing import List, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class HelperSettings:
    """What the helper's ElasticDriver needs from the job's options."""

    np: int
    min_np: int
    failure_limit: int
    max_np: Optional[int] = None
    elastic_timeout: float = 600.0
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[int, int]] = None
    start_timeout: float = 120.0  # how long the survivors of a reset are held for a new worker
    allowed: List[str] = dataclasses.field(default_factory=list)  # rendezvous client addresses

    def encode(self) -> str:
        fields = dataclasses.asdict(self)
        if self.cooldown_range is not None:
            fields["cooldown_range"] = list(self.cooldown_range)
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> "HelperSettings":
        """Raises ValueError, KeyError or TypeError when ``text`` is not valid settings."""
        given = json.loads(text)
        cooldown = given.get("cooldown_range")
        return cls(np=int(given["np"]), min_np=int(given["min_np"]),
                   failure_limit=int(given["failure_limit"]),
                   max_np=None if given.get("max_np") is None else int(given["max_np"]),
                   elastic_timeout=float(given.get("elastic_timeout", cls.elastic_timeout)),
                   reset_limit=None if given.get("reset_limit") is None
                   else int(given["reset_limit"]),
                   cooldown_range=None if cooldown is None
                   else (int(cooldown[0]), int(cooldown[1])),
                   start_timeout=float(given.get("start_timeout", cls.start_timeout)),
                   allowed=[str(a) for a in given.get("allowed", [])])
