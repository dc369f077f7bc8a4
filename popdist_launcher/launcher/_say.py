"""Verbose messages of the launcher process, to stderr.

The launcher is on every job's start-up path, and importing ``logging`` costs it about 8 ms;
so its modules report through this switch, which costs nothing unless ``-v`` turned it on.
Library code that runs inside instances uses ``logging`` as usual.
"""
from __future__ import annotations

import sys

verbose = 0


def debug(message: str, *args: object) -> None:
    if verbose:
        sys.stderr.write("poprun-lite: " + (message % args if args else message) + "\n")
        sys.stderr.flush()
