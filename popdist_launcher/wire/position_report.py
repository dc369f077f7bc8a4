"""The hang check's position report: one line a program's sampler (``whereabouts.py``) sends
its launcher (``launcher/supervision/hang/evidence.py``) when where it is or what it does changes.

``LEFT RANK ACTIVITY POSITION<TAB>DETAIL``: LEFT, the number of waits (a collective or a
TensorFlow step) the program has left so far; RANK, its Horovod rank (-1 before
``hvd.init()``); ACTIVITY, what its own threads did (ACTIVITIES); POSITION, where its main
thread is (a kind from KINDS, then for "collective" and "long" a space and the collective's or
the phase's name); DETAIL, where its telling thread is ("main thread in gen at prog.py:41").

Imports nothing: the sampler runs in every Python program poprun-lite starts.
"""

ACTIVITIES = ("busy", "sleeping", "blocked", "waiting")
# busy: its own code ran (CPU, I/O or a moving stack); sleeping: in time.sleep (a choice);
# blocked: every thread of its own code waits without CPU or I/O; waiting: none runs its code
KINDS = ("program", "import", "tensorflow", "computing", "collective", "long", "exit")
# its own code; an import; a TensorFlow step not computing (a graph collective waits) or
# computing; a Python collective NAME; a marked long phase NAME; interpreter exit, waiting for
# a thread
LIMIT = 500  # bytes of one report


def encode(left: int, rank: int, activity: str, where: str, detail: str) -> bytes:
    """The report (one line, at most LIMIT bytes, no newline or NUL inside)."""
    text = f"{left} {rank} {activity} {where}\t{detail}"
    return text.replace("\n", " ").replace("\0", " ").encode("utf-8", "replace")[:LIMIT]


def decode(text: str) -> "tuple[int, int, str, str, str]":
    """(left, rank, activity, position, detail) from ``encode``'s line; ValueError if it is
    not one (a position of an unknown kind is returned as it is: the reader decides)."""
    head, _, detail = text.rstrip("\n").partition("\t")
    left, rank, activity, where = (head.split(" ", 3) + ["", "", "", ""])[:4]
    if activity not in ACTIVITIES:
        raise ValueError(f"not a position report: {text!r}")
    return int(left), int(rank), activity, where, detail
