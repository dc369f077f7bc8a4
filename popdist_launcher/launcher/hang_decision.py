"""Who is hung, from where every instance is (a pure function, the same on every backend): run
once the job made no progress for the hang bound (``hang.py``), over the positions the
instances' samplers sent (``whereabouts.py``).

- Anyone in a marked long phase: no hang (the phase may hold its peers as long as it runs).
- Instances in their own code (``program``) while others wait (in a collective, or in a
  TensorFlow step that does not compute, where a graph collective waits unseen): the former
  are hung, absent from the collective the others entered. A TensorFlow step that computes
  waits for nobody.
- Nobody in their own code, and instances wait in different collectives (a TensorFlow step
  counts as one, where some instance waits in a collective it can see): a mismatch. Those
  outside the largest group are hung; when no group is the largest, all of them are (all
  named).
- Otherwise (everyone in their own code, or everyone in TensorFlow: an evaluation pass, a long
  first step, a compile): no hang.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, NamedTuple, Tuple

KINDS = ("program", "tensorflow", "computing", "collective", "long")


class Position(NamedTuple):
    kind: str  # one of KINDS, or "unknown" (never reported: not a Python program, or off)
    name: str = ""  # the collective ("sync > broadcast_variables") or the long phase

    def describe(self) -> str:
        if self.kind == "collective":
            return f"collective {self.name}"
        if self.kind == "tensorflow":
            return "a TensorFlow step, not computing (a graph collective)"
        if self.kind == "computing":
            return "a TensorFlow step, computing"
        if self.kind == "long":
            return f"long phase '{self.name}'"
        if self.kind == "program":
            return "its own code, outside any collective"
        return "an unknown place"


UNKNOWN = Position("unknown")


def parse(text: str) -> Tuple[int, Position]:
    """A sampler's report "LEFT KIND [NAME]": (times it left a wait, position)."""
    left, _, rest = text.strip().partition(" ")
    kind, _, name = rest.partition(" ")
    try:
        count = int(left)
    except ValueError:
        return 0, UNKNOWN
    return count, Position(kind, name) if kind in KINDS else UNKNOWN


class Verdict(NamedTuple):
    hung: Tuple[int, ...]  # the instances to cut, lowest first
    why: str  # "absent", "mismatch", or "" (no hang)
    peers: str  # where the others wait ("instance 0 in collective allreduce; ...")
    note: str = ""  # why there is no hang
    peers_at: Tuple[int, ...] = ()  # the instances ``peers`` names


def _instance(index: int) -> str:
    return f"instance {index}"


def describe_groups(positions: Mapping[int, Position], indices: List[int],
                    name: Callable[[int], str] = _instance) -> str:
    """ "instances 0, 2 in collective allreduce; instance 3 in ..." (``name``: an instance's
    name, "instance N")."""
    groups: Dict[Position, List[int]] = {}
    for index in sorted(indices):
        groups.setdefault(positions[index], []).append(index)
    parts = []
    for where, members in groups.items():
        names = [name(i) for i in members]
        if len(names) > 1 and all(n.startswith("instance ") for n in names):
            who = "instances " + ", ".join(n[len("instance "):] for n in names)
        else:
            who = ", ".join(names)
        parts.append(f"{who} in {where.describe()}")
    return "; ".join(parts)


def decide(positions: Mapping[int, Position]) -> Verdict:
    """The hung instances among ``positions`` (index -> where it is; the running instances)."""
    long = [i for i, p in positions.items() if p.kind == "long"]
    if long:
        return Verdict((), "", "", f"{describe_groups(positions, long)} (not a hang)")
    absent = sorted(i for i, p in positions.items() if p.kind == "program")
    waiting = sorted(i for i, p in positions.items() if p.kind in ("collective", "tensorflow"))
    if absent and waiting:
        return Verdict(tuple(absent), "absent", describe_groups(positions, waiting), "",
                       tuple(waiting))
    if absent:
        return Verdict((), "", "", "every instance runs its own code; nobody waits (not a hang)")
    groups: Dict[str, List[int]] = {}
    for index in waiting:
        groups.setdefault(positions[index].name, []).append(index)  # "": a TensorFlow step
    if len(groups) < 2:
        return Verdict((), "", "", "nobody is outside the collectives the others wait in")
    sizes = sorted((len(m) for m in groups.values()), reverse=True)
    if sizes[0] > sizes[1]:
        largest = max(groups.values(), key=len)
        hung = sorted(i for m in groups.values() if m is not largest for i in m)
        return Verdict(tuple(hung), "mismatch", describe_groups(positions, largest), "",
                       tuple(largest))
    everyone = sorted(i for m in groups.values() for i in m)
    return Verdict(tuple(everyone), "mismatch", describe_groups(positions, everyone), "",
                   tuple(everyone))
