"""The host discovery script, run once: its 'host' / 'host:slots' lines parsed, or what went
wrong in one sentence. Used by the launcher at start and by the discovery process (``Poller``).

Standard library only: this runs in the launcher, which never imports Horovod.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from typing import Callable, Dict, List, Optional, Tuple

from popdist_launcher.launcher.supervision.processes import signal_group

Hosts = List[Tuple[str, int]]

_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_HOST_LINE = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:\[\]]+))(?::(?P<slots>.*))?")
_SLOTS = re.compile(r"[0-9]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_EXPECTED = "'host' or 'host:slots' lines"
# Kinds of DiscoveryError.
UNRUNNABLE, EXIT, TIMEOUT, GARBAGE, EMPTY = "unrunnable", "exit", "timeout", "garbage", "empty"


class DiscoveryError(ValueError):
    """The host discovery script could not say which hosts are available; ``str()`` is one
    sentence for the user and ``kind`` says why: unrunnable, exit, timeout, garbage or empty."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _parse_line(line: str, slots_per_host: int) -> Optional[Tuple[str, int]]:
    match = _HOST_LINE.fullmatch(line)
    if match is None:
        return None
    if match["v6"] is not None:
        import ipaddress

        try:
            host = str(ipaddress.IPv6Address(match["v6"]))
        except ValueError:
            return None
    elif _HOST_NAME.fullmatch(match["name"]):
        host = match["name"]
    else:
        return None
    slots = match["slots"]
    if slots is None:
        return host, slots_per_host
    if not _SLOTS.fullmatch(slots) or int(slots) == 0:
        return None
    return host, int(slots)


def parse_hosts(text: str, slots_per_host: int, script: str) -> Hosts:
    """(host, slots) for each ``host`` or ``host:slots`` line of ``text``, in order of first
    appearance (a repeated host keeps its first position, its last slot count wins).

    Blank lines and lines starting with ``#`` are skipped; a bare host has ``slots_per_host``
    slots; an IPv6 address is written in brackets (``[::1]:2``) and returned without them.
    Anything else raises :class:`DiscoveryError` naming ``script`` and the line.
    """
    found: Dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _parse_line(line, slots_per_host)
        if parsed is None:
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise DiscoveryError(
                f"the host discovery script {script} printed '{shown}' on line {number}, which "
                f"is not 'host' or 'host:slots' with slots a positive integer.", GARBAGE)
        host, slots = parsed
        found[host] = slots
    return list(found.items())


def _why_unrunnable(script: str) -> Optional[str]:
    """Why the shell could not start ``script``'s command (exit 126/127), or None when the
    command itself exists and is executable (so the 126/127 came from inside it)."""
    try:
        words = shlex.split(script)
    except ValueError:
        return None
    while words and _ASSIGNMENT.match(words[0]):  # FOO=1 ./d.sh
        words.pop(0)
    if not words:
        return None
    program = os.path.expanduser(words[0])
    if "/" not in program:
        import shutil

        return None if shutil.which(program) else f"no command {program!r} on PATH"
    if not os.path.exists(program):
        return os.strerror(2)  # ENOENT
    if os.path.isdir(program):
        return os.strerror(21)  # EISDIR
    if not os.access(program, os.X_OK):
        return os.strerror(13) + " (the file is not executable)"  # EACCES
    return None


def _cannot_run(script: str, reason: str) -> DiscoveryError:
    return DiscoveryError(
        f"--host-discovery-script {script} cannot be run: {reason}; give an executable file "
        f"(chmod +x) or a command such as 'python d.py'.", UNRUNNABLE)


def describe_exit(returncode: int) -> str:
    """How a process with this return code ended, e.g. 'exited with 1'."""
    if returncode >= 0:
        return f"exited with {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def run_discovery(script: str, slots_per_host: int, timeout: float = 10.0, *,
                  on_start: Optional[Callable[[int], None]] = None) -> Hosts:
    """Run the host discovery command ``script`` once, as horovodrun does (through the shell),
    and return its hosts (see :func:`parse_hosts`).

    The command runs in a process group of its own, bounded by ``timeout`` seconds; when it
    ends, times out or this call is interrupted, whatever is left in its group is killed and
    reaped. ``on_start(pid)`` (pid = the group's id) is called as soon as it runs. Raises
    :class:`DiscoveryError` (one sentence) when it cannot run, exits non-zero, hangs, prints
    something that is not a host line, or prints no host.
    """
    try:
        proc = subprocess.Popen(script, shell=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as err:
        raise _cannot_run(script, err.strerror or str(err)) from None
    if on_start is not None:
        on_start(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise DiscoveryError(
                f"the host discovery script {script} did not finish within {timeout:g} s; it "
                f"must print the current hosts and exit.", TIMEOUT) from None
        raise
    signal_group(proc.pid, signal.SIGKILL)  # what it left running in the background
    if proc.returncode in (126, 127):
        reason = _why_unrunnable(script)
        if reason is not None:
            raise _cannot_run(script, reason)
    if proc.returncode != 0:
        lines = [line.strip() for line in err.decode(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        said = f"last stderr line: {lines[-1][:200]}" if lines else "nothing on stderr"
        raise DiscoveryError(
            f"the host discovery script {script} {describe_exit(proc.returncode)} ({said}); it "
            f"must exit 0 and print {_EXPECTED}.", EXIT)
    hosts = parse_hosts(out.decode(errors="replace"), slots_per_host, script)
    if not hosts:
        raise DiscoveryError(
            f"the host discovery script {script} printed no hosts; it must print {_EXPECTED}, "
            f"one per available host.", EMPTY)
    return hosts
