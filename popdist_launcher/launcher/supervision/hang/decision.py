"""Who is hung, and of which kind, from the evidence on every running instance (a pure
function, the same on every backend; ``check.py`` runs it every second).

Kinds, each with its bound (``bounds.py``):
- **stopped**: its process is stopped (T) or in an uninterruptible wait (D) at every probe for
  the short bound.
- **alone**: some of its peers ended, and it still waits in a collective or a TensorFlow step,
  at interpreter exit for a thread that does not run, or blocked: the short bound.
- Otherwise only while peers **wait** (in a collective, or in a TensorFlow step that does not
  compute), for the instances that hold them (the rest):
  - **absent**: it waits elsewhere: in another collective than the largest group (when no
    group is the largest, all of them), or in a TensorFlow step while Horovod's stall
    inspector names it missing: the wait bound.
  - **blocked**: every thread of its own code waits without CPU or I/O (a lock, a read, a
    queue, a generator's wait): the wait bound.
  - **busy**: its own code runs (CPU, I/O or a moving stack), or it imports modules (whatever
    its other threads do): the long bound.
  - never: one that computes in TensorFlow, sleeps (``time.sleep`` is a choice), or is in a
    marked long phase (which holds every verdict but stopped).
The time held is how long both it and its peers have been so.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

from popdist_launcher.launcher.supervision.hang.bounds import Bounds
from popdist_launcher.launcher.supervision.hang.evidence import Position, Seen

# the bound (``Bounds`` field) each kind is held to
BOUND_OF = {"stopped": "short", "alone": "short", "absent": "wait", "blocked": "wait",
            "busy": "long"}
STATES = {"T": "stopped (T)", "t": "stopped by a tracer (t)",
          "D": "in an uninterruptible wait (D)"}


class Hung(NamedTuple):
    index: int
    kind: str  # stopped, alone, absent, blocked, busy (BOUND_OF)
    held: float  # seconds
    evidence: str  # what shows it, in words


class Verdict(NamedTuple):
    hung: Tuple[Hung, ...]  # lowest index first
    peers: str = ""  # where the waiting peers are ("instance 0 in collective allreduce")
    note: str = ""  # why nobody is hung


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


def _waits(seen: Seen, someone_missing: bool) -> bool:
    """It waits for its peers: in a collective, or in a TensorFlow step that does not compute
    (unless the evidence says it holds them)."""
    if seen.position.kind == "collective":
        return True
    if seen.position.kind != "tensorflow" or seen.missing:
        return False
    return someone_missing or seen.activity in ("waiting", "unknown")


def _thread(seen: Seen) -> str:
    return f"; {seen.detail}" if seen.detail else ""


def decide(seen: Mapping[int, Seen], bounds: Bounds, alone_s: Optional[float] = None,
           name: Callable[[int], str] = _instance) -> Verdict:
    """The hung instances among ``seen`` (index -> evidence; the running instances that join
    collectives). ``alone_s``: seconds since the last of their peers ended, None if none has."""
    stopped = tuple(Hung(i, "stopped", s.state_s, f"its process was {STATES[s.state]} at "
                                                   f"every probe for {s.state_s:.0f} s")
                    for i, s in sorted(seen.items())
                    if s.state in STATES and s.state_s >= bounds.short)
    if stopped:
        return Verdict(stopped)
    long = [i for i, s in seen.items() if s.position.kind == "long"]
    positions = {i: s.position for i, s in seen.items()}
    if long:
        return Verdict((), note=f"{describe_groups(positions, long, name)} (not a hang)")
    someone_missing = any(s.missing for s in seen.values())
    waiting = sorted(i for i, s in seen.items() if _waits(s, someone_missing))
    if alone_s is not None:
        alone = _alone(seen, waiting, bounds, alone_s)
        if alone:
            return Verdict(alone, note="its peers ended")
    if not waiting:
        return _all_missing(seen, bounds, positions, name)
    wait_s = max(seen[i].position_s for i in waiting)
    holders = [i for i in sorted(seen) if i not in waiting and
               seen[i].position.kind != "computing"]
    peers = describe_groups(positions, waiting, name)
    hung: List[Hung] = []
    for index in holders:
        found = _holder(index, seen[index], bounds, wait_s)
        if found is not None:
            hung.append(found)
    if hung or holders:
        return Verdict(tuple(hung), peers, "" if hung else "the instances the others wait for "
                                                          "are working, sleeping or not long")
    return _mismatch(seen, waiting, bounds, positions, name)


def _alone(seen: Mapping[int, Seen], waiting: List[int], bounds: Bounds,
           alone_s: float) -> Tuple[Hung, ...]:
    hung = []
    for index, s in sorted(seen.items()):
        held = min(alone_s, s.position_s)
        ago = f"its peers ended {alone_s:.0f} s ago"
        if index in waiting:
            what, bound = f"it still waits in {s.position.describe()}", bounds.short
        elif s.position.kind == "exit" and s.activity != "busy":
            what, bound = f"it waits at interpreter exit for a thread{_thread(s)}", bounds.short
        elif s.activity == "blocked" and s.position.kind not in ("computing", "import"):
            what, bound = f"it is blocked in {s.position.describe()}{_thread(s)}", bounds.short
            held = min(held, s.activity_s)
        elif s.position.kind == "import" or \
                (s.activity == "busy" and s.position.kind != "computing"):
            if s.position.kind != "import":
                held = min(held, s.activity_s)
            if held >= bounds.long:  # working alone (an import is work): the busy bound
                hung.append(Hung(index, "busy", held, f"{ago} and it ran its own code since"
                                                      f"{_thread(s)}"))
            continue
        else:
            continue
        if held >= bound:
            hung.append(Hung(index, "alone", held, f"{ago} and {what}"))
    return tuple(hung)


def _holder(index: int, s: Seen, bounds: Bounds, wait_s: float) -> Optional[Hung]:
    if s.position.kind == "exit" and s.activity != "busy":
        held = min(s.position_s, wait_s)
        if held >= bounds.wait:
            return Hung(index, "absent", held, f"its program ended {held:.0f} s ago and it "
                                               f"waits at interpreter exit for a thread"
                                               f"{_thread(s)}")
        return None
    if s.activity == "sleeping" or s.position.kind == "computing":
        return None
    if s.position.kind == "import":  # loading modules is work, whatever else its threads do
        held = min(s.position_s, wait_s)
        if held >= bounds.long:
            return Hung(index, "busy", held, f"it was in {s.position.describe()} for "
                                             f"{held:.0f} s{_thread(s)}")
        return None
    if s.missing and s.activity in ("waiting", "unknown") and s.position.kind != "program":
        held = min(s.position_s, wait_s)
        if held >= bounds.wait:
            return Hung(index, "absent", held,
                        f"it waited in {s.position.describe()} for {held:.0f} s, and "
                        f"Horovod's stall check names it missing from {s.missing}"
                        f"{_thread(s)}")
        return None
    if s.activity == "blocked":
        held = min(s.activity_s, wait_s)
        named = f"; Horovod's stall check names it missing from {s.missing}" if s.missing else ""
        if held >= bounds.wait:
            return Hung(index, "blocked", held, f"no CPU and no I/O for {held:.0f} s in "
                                                f"{s.position.describe()}{_thread(s)}{named}")
        return None
    held = min(s.position_s, wait_s)  # busy, or no evidence of its threads (unknown)
    if held >= bounds.long:
        return Hung(index, "busy", held, f"it ran its own code (CPU, I/O or a moving stack) "
                                         f"for {held:.0f} s in {s.position.describe()}"
                                         f"{_thread(s)}")
    return None


def _all_missing(seen: Mapping[int, Seen], bounds: Bounds,
                 positions: Mapping[int, Position], name: Callable[[int], str]) -> Verdict:
    """Nobody waits for the others alone: when Horovod names every waiting instance missing
    (each waits under a tensor name the others never submit), those missing from the tensor
    the fewest are missing from are absent (all of them when no such group is smaller)."""
    named = sorted(i for i, s in seen.items() if s.missing and
                   s.position.kind in ("tensorflow", "collective") and
                   s.activity in ("waiting", "unknown"))
    if not named or len(named) < len(seen):
        return Verdict((), note="nobody waits for another instance")
    groups: Dict[str, List[int]] = {}
    for index in named:
        groups.setdefault(seen[index].missing, []).append(index)
    sizes = sorted(len(m) for m in groups.values())
    out = min(groups.values(), key=len) if len(sizes) > 1 and sizes[0] < sizes[1] else named
    held = min(seen[i].position_s for i in named)
    if held < bounds.wait:
        return Verdict((), note="every instance waits under another name, not long yet")
    hung = tuple(Hung(i, "absent", held,
                      f"it waited in {seen[i].position.describe()} for {held:.0f} s, and "
                      f"Horovod's stall check names it missing from {seen[i].missing}")
                 for i in out)
    return Verdict(hung, describe_groups(positions, named, name))


def _mismatch(seen: Mapping[int, Seen], waiting: List[int], bounds: Bounds,
              positions: Mapping[int, Position], name: Callable[[int], str]) -> Verdict:
    """Everyone waits: in different collectives, those outside the largest group are absent
    from it (all of them when no group is the largest)."""
    groups: Dict[str, List[int]] = {}
    for index in waiting:
        groups.setdefault(seen[index].position.name, []).append(index)  # "": TensorFlow
    if len(groups) < 2:
        return Verdict((), note="nobody is outside the collectives the others wait in")
    sizes = sorted((len(m) for m in groups.values()), reverse=True)
    if sizes[0] > sizes[1]:
        largest = max(groups.values(), key=len)
        out = [i for i in waiting if i not in largest]
    else:
        largest, out = waiting, list(waiting)
    held = min(min(seen[i].position_s for i in waiting), max(seen[i].position_s for i in largest))
    if held < bounds.wait:
        return Verdict((), note="the instances wait in different collectives, not long yet")
    majority = largest is not waiting
    hung = tuple(Hung(i, "absent", held,
                      f"it waited in {seen[i].position.describe()} for {held:.0f} s while "
                      + ("its peers waited in another" if majority else
                         "the others waited in different collectives, none in the majority"))
                 for i in out)
    return Verdict(hung, describe_groups(positions, largest if majority else waiting, name))
