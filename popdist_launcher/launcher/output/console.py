"""The launcher's one writer to the user: its lines, prefixed ``poprun-lite: ``, on stderr or
through the open output Router. Imports ``os`` and ``sys`` only: the start-up path and every
wrapper load it."""
import os
import sys

NAME = "poprun-lite"
PREFIX = NAME + ": "
verbose = 0  # -v's count, set by the CLI
_sink = None  # the open Router's say, or None: stderr


def line(text: str) -> str:
    """``text`` as one of the launcher's lines (prefixed), to put where the caller wants it."""
    return PREFIX + text


def say(text: str) -> None:
    """A notice to the user."""
    write(PREFIX + text)


def warn(text: str) -> None:
    """A warning to the user."""
    write(PREFIX + "warning: " + text)


def debug(text: str, *args: object) -> None:
    """A message for ``-v``: ``text % args``, nothing unless -v was given."""
    if verbose:
        write(PREFIX + (text % args if args else text))


def write(text: str) -> None:
    """Text whose lines have their prefixes already (``line``, a report), to the user."""
    if _sink is not None:
        _sink(text)
        return
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except OSError:
        pass  # its reader has gone (a closed pipe): nobody is left to tell


def open_standard_streams() -> None:
    """Descriptors 0-2 that the caller left closed (``>&-``) become /dev/null, as a missing
    stdout is for Python's own print: what would go there is dropped, instead of going to the
    first socket or pipe the launcher opens, which would get that number."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def attach(sink: "Callable[[str], None]") -> None:  # noqa: F821 (typing is not imported)
    """Send the launcher's lines to ``sink`` until ``detach``: the open Router's say, which keeps
    them out of an instance's unfinished line."""
    global _sink
    _sink = sink


def detach(sink: "Callable[[str], None]") -> None:  # noqa: F821
    """Back to stderr, if ``sink`` is still the one attached."""
    global _sink
    if _sink == sink:
        _sink = None


def flush_standard_streams() -> None:
    """Flush stdout and stderr before the process ends; a reader that has gone is not an
    error."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
