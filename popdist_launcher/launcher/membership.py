"""Which hosts an elastic job may use: the host discovery script (run once, or periodically in a
child process), the blacklist with Horovod's cooldown rule, the count of a host's failures in a
row without progress, and the log of membership changes.

Standard library only: this runs in the launcher, which never imports Horovod.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from popdist_launcher.launcher.processes import signal_group

Hosts = List[Tuple[str, int]]

_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_HOST_LINE = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:\[\]]+))(?::(?P<slots>.*))?")
_SLOTS = re.compile(r"[0-9]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_EXPECTED = "'host' or 'host:slots' lines"
# Kinds of DiscoveryError (and of a failed Answer); a good Answer's kind is "ok".
UNRUNNABLE, EXIT, TIMEOUT, GARBAGE, EMPTY, POLLER, OK = (
    "unrunnable", "exit", "timeout", "garbage", "empty", "poller", "ok")
POLLER_MODULE = "popdist_launcher.launcher.spawned.discovery"
POLLER_STOP_GRACE_SECONDS = 5.0


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


def _ended(returncode: int) -> str:
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
            f"the host discovery script {script} {_ended(proc.returncode)} ({said}); it must "
            f"exit 0 and print {_EXPECTED}.", EXIT)
    hosts = parse_hosts(out.decode(errors="replace"), slots_per_host, script)
    if not hosts:
        raise DiscoveryError(
            f"the host discovery script {script} printed no hosts; it must print {_EXPECTED}, "
            f"one per available host.", EMPTY)
    return hosts


class Blacklist:
    """Hosts excluded after a failure, with Horovod's cooldown rule
    (``horovod/runner/elastic/discovery.py``, ``HostState``): the n-th time a host is
    blacklisted (n = 1, 2, ...) it stays out for ``clamp(low * 2**n + U(0,1) * low, low, high)``
    seconds; blacklisting it again during its cooldown changes nothing. Without a cooldown range
    a blacklisted host never comes back.
    """

    def __init__(self, cooldown_range: Optional[Tuple[int, int]],
                 clock: Callable[[], float] = time.monotonic, rng=None) -> None:
        if rng is None:
            import random

            rng = random.Random()
        self.cooldown_range = cooldown_range
        self._clock = clock
        self._rng = rng
        self._count: Dict[str, int] = {}
        self._until: Dict[str, Optional[float]] = {}  # None: for the rest of the job

    def add(self, host: str) -> Optional[float]:
        """Blacklist ``host``; return its cooldown in seconds (the time left of the current one
        if it is in one), or None when it is out for the rest of the job."""
        now = self._clock()
        if host in self._until and (self._until[host] is None or self._until[host] > now):
            return None if self._until[host] is None else self._until[host] - now
        if self.cooldown_range is None:
            self._until[host] = None
            return None
        low, high = self.cooldown_range
        count = self._count.get(host, 0) + 1
        self._count[host] = count
        cooldown = max(low, min(high, low * 2.0 ** min(count, 64) + self._rng.random() * low))
        self._until[host] = now + cooldown
        return cooldown

    def blocked(self, host: str) -> bool:
        """True while ``host`` is blacklisted and its cooldown has not ended."""
        if host not in self._until:
            return False
        until = self._until[host]
        return until is None or until > self._clock()

    def returned(self) -> List[str]:
        """Hosts whose cooldown ended since the last call, in the order they were blacklisted."""
        now = self._clock()
        ended = [h for h, until in self._until.items() if until is not None and until <= now]
        for host in ended:
            del self._until[host]
        return ended


PROGRESS_S = 60.0  # an instance (restart mode: an attempt) that ran this long made progress


class FailureStreaks:
    """Failures of each host in a row without progress (--host-failure-limit): a failure after
    progress starts its host's count again at 1."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: Dict[str, int] = {}

    def record(self, host: str, progressed: bool) -> int:
        """Count one failure of ``host``; its failures in a row without progress, this one
        included."""
        count = 1 if progressed else self._counts.get(host, 0) + 1
        self._counts[host] = count
        return count

    def clear(self, host: str) -> None:
        self._counts.pop(host, None)

    def count(self, host: str) -> int:
        return self._counts.get(host, 0)

    def reached(self, host: str) -> bool:
        return self.count(host) >= self.limit

    def sentence(self, host: str, what: str) -> str:
        """Why the job ends: ``what`` names the failed instance and how it ended."""
        return (f"{what}, the {_ordinal(self.count(host))} failure of {host} in a row "
                f"without progress (--host-failure-limit {self.limit}), and no other host can "
                f"carry the job.")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class Answer(NamedTuple):
    """One run of the discovery script: its hosts (kind "ok"), or the error sentence and its
    kind (a DiscoveryError kind, or "poller" when the discovery process itself ended)."""
    hosts: Optional[Hosts]
    error: Optional[str]
    kind: str


class Poller:
    """Runs the discovery script every ``interval`` seconds in a child process (its own process
    group; see ``spawned/discovery.py``) and hands its answers over a non-blocking pipe.

    Register :meth:`fileno` in a selector and call :meth:`read` when it is readable. The child
    ends by itself when this process dies. If the child ends otherwise (someone killed it), the
    pipe reads EOF: :meth:`read` reports it (kind "poller") and starts a new child writing into
    the same pipe, so :meth:`fileno` and a selector's registration stay valid.
    """

    def __init__(self, script: str, slots_per_host: int, interval: float = 1.0,
                 timeout: float = 10.0) -> None:
        self.script = script
        self.slots_per_host = slots_per_host
        self.interval = interval
        self.timeout = timeout
        self._proc: Optional[subprocess.Popen] = None
        self._r = -1
        self._buffer = b""

    def start(self) -> None:
        self._r, w = os.pipe()
        os.close(w)
        os.set_blocking(self._r, False)
        self._spawn()

    def _spawn(self) -> None:
        self._buffer = b""
        # A new write end of the same pipe (Linux: a pipe opens like a FIFO through /proc).
        w = os.open(f"/proc/self/fd/{self._r}", os.O_WRONLY)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", POLLER_MODULE, self.script, str(self.slots_per_host),
                 repr(float(self.interval)), repr(float(self.timeout))],
                stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            os.close(w)

    @property
    def pid(self) -> Optional[int]:
        """The discovery process's pid (and process group id), None before start()."""
        return self._proc.pid if self._proc else None

    def fileno(self) -> int:
        return self._r

    def read(self) -> List[Answer]:
        """The answers that arrived since the last call (never blocks; [] when none)."""
        chunks = [self._buffer]
        ended = False
        while True:
            try:
                data = os.read(self._r, 65536)
            except BlockingIOError:
                break
            if not data:
                ended = True
                break
            chunks.append(data)
        *lines, self._buffer = b"".join(chunks).split(b"\n")
        answers = [_answer(json.loads(line)) for line in lines if line]
        if ended and self._proc is not None:
            self._proc.wait()
            answers.append(Answer(None, f"the host discovery process (pid {self._proc.pid}) "
                                        f"{_ended(self._proc.returncode)}; started a new one.",
                                  POLLER))
            self._spawn()
        return answers

    def close(self) -> None:
        """Stop the discovery process and the script it is running; reap it; close the pipe.

        SIGTERM first: the child kills its script's process group (its own session) and exits;
        SIGKILL to its group after a grace period."""
        proc, self._proc = self._proc, None
        if proc is not None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(POLLER_STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            signal_group(proc.pid, signal.SIGKILL)
        if self._r >= 0:
            os.close(self._r)
        self._r = -1


def _answer(frame: dict) -> Answer:
    if "hosts" in frame:
        return Answer([(host, slots) for host, slots in frame["hosts"]], None, OK)
    return Answer(None, frame["error"], frame["kind"])


class Change(NamedTuple):
    """What differs from what the caller last saw: hosts that became usable or gained slots,
    hosts that stopped being usable or lost slots, and a warning to show (or None)."""
    added: List[str]
    removed: List[str]
    warning: Optional[str]


class Membership:
    """The hosts an elastic job may use now: the last good discovery answer minus blacklisted
    hosts. Hosts keep the order they became usable in (Horovod's rule: older hosts first, so
    rank 0 stays where it is; a host back from its cooldown comes last)."""

    def __init__(self, initial: Hosts, blacklist: Blacklist,
                 poller: Optional[Poller] = None) -> None:
        self.hosts: Hosts = list(initial)
        self.blacklist = blacklist
        self.poller = poller
        self._order: List[str] = []
        self._seen = self._refresh()
        self._warned: Set[str] = set()

    def _refresh(self) -> Dict[str, int]:
        slots = dict(self.hosts)
        kept = [h for h in self._order if h in slots and not self.blacklist.blocked(h)]
        known = set(kept)
        kept += [h for h in slots if h not in known and not self.blacklist.blocked(h)]
        self._order = kept
        return {h: slots[h] for h in kept}

    def usable(self) -> Hosts:
        """(host, slots) of the usable hosts, in order (the first is rank 0's)."""
        self._seen = self._refresh()
        return list(self._seen.items())

    def on_answer(self, answer: Answer) -> Change:
        """Take one discovery answer. A failed one keeps the last good answer and brings one
        warning per kind until the next good answer."""
        warning = None
        if answer.hosts is not None:
            self.hosts = list(answer.hosts)
            self._warned.clear()
        elif answer.kind not in self._warned:
            self._warned.add(answer.kind)
            warning = answer.error
        before, now = self._seen, self._refresh()
        self._seen = now
        return Change([h for h in now if now[h] > before.get(h, 0)],
                      [h for h in before if before[h] > now.get(h, 0)], warning)

    def close(self) -> None:
        """Stop the poller, if any."""
        if self.poller is not None:
            self.poller.close()


class MembershipLog:
    """Membership events, to the console (through ``say``) and to
    ``<output_dir>/membership.log`` (created on the first record, one line at a time)."""

    def __init__(self, say: Callable[[str], None], output_dir: Optional[str]) -> None:
        self._say = say
        self.path = os.path.join(output_dir, "membership.log") if output_dir else None

    def record(self, text: str) -> None:
        now = datetime.now().astimezone()
        self._say(f"poprun-lite: [{now:%H:%M:%S}.{now.microsecond // 1000:03d}] {text}")
        if self.path is not None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(f"{now.isoformat(timespec='milliseconds')} {text}\n")
