"""The launcher's one writer to the user: its lines, prefixed ``poprun-lite: ``, on stderr or
through the open output Router. Imports ``sys`` only: the start-up path and every wrapper load
it."""
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
    else:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


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
