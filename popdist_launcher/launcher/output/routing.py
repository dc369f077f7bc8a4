"""Where instance output goes: the console (tagged per line), per-attempt log files, and the
tails the root-cause report quotes. The only writer to the launcher's stdout and stderr.

Lines end at ``\\n`` only. Log files get the program's bytes unchanged (with --timestamp-output,
each line starts with its arrival time). On the console every line gets its ``[i]<stream>:`` tag
once (``[i@host]`` with --tag-output-host, after the time with --timestamp-output); a ``\\r``
inside a line (a progress bar) redraws in place on a terminal (the tag is repeated after each
``\\r``), and elsewhere the line is written whole when its
``\\n`` arrives. Partial lines are kept per instance and stream, never merged. On a
terminal, an unfinished line without ``\\r`` waits for its end instead of being split by another
instance's output, but is shown once its instance is quiet for ``HOLD_SECONDS`` (a prompt) or
after ``HOLD_MAX_SECONDS``.

Identical start-up lines of several instances (TensorFlow's C++ log lines and start-up notices)
reach the console once, tagged with the instances that wrote them (``[0-3]<stderr>:``), after
waiting at most ``twins.WINDOW_SECONDS`` for each other; the notices at most once per job, and
never in the tails the report quotes unless an instance wrote nothing else. ``-v`` shows every
line as it comes. Log files get every line.
"""
from __future__ import annotations

import collections
import errno
import os
import select
import stat
import time
from typing import AbstractSet, Deque, Dict, List, NamedTuple, Optional, Set, Tuple, Union

from popdist_launcher.launcher.output import console as launcher_console
from popdist_launcher.launcher.output import startup_lines
from popdist_launcher.launcher.output.twins import Group, Shown, Twins, instance_ranges

STDOUT, STDERR = "stdout", "stderr"
TAIL_LINE_CHARS = 2000
HOLD_SECONDS = 0.25  # on a terminal, an unfinished line is shown after this long without output
HOLD_MAX_SECONDS = 2.0  # ... or after this long in all (dots printed one by one still show)


class OutputDirError(ValueError):
    """--output-dir cannot be used; one sentence for the user."""


class _Held:
    """An unfinished line held back on the terminal: when it began and last grew, its bytes."""
    __slots__ = ("first", "last", "chunks")

    def __init__(self, first: float, last: float, chunks: List[bytes]) -> None:
        self.first, self.last, self.chunks = first, last, chunks

    def deadline(self) -> float:
        return min(self.last + HOLD_SECONDS, self.first + HOLD_MAX_SECONDS)


class OutputOptions(NamedTuple):
    tag_output: bool = True
    only_instance: Union[None, int, AbstractSet[int]] = None  # the instances shown on the console
    output_dir: Optional[str] = None
    tail_lines: int = 20
    tag_host: bool = False  # the tag names the instance's host: [i@host]
    timestamp: bool = False  # every line starts with [YYYY-MM-DDTHH:MM:SS.mmm] (local time)
    instance_hosts: Tuple[str, ...] = ()  # host of each instance, for tag_host


def timestamp() -> bytes:
    """The prefix --timestamp-output gives a line: local time to the millisecond."""
    now = time.time()
    return (time.strftime("[%Y-%m-%dT%H:%M:%S", time.localtime(now))
            + f".{int(now % 1 * 1000):03d}]").encode()


def write_all(fd: int, data: bytes) -> bool:
    """Write the whole buffer; a closed reader (EPIPE) drops it and gives False."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                return False
            raise
        view = view[n:]
    return True


def open_output_dir(path: str) -> int:
    """Create ``path`` if needed and return a descriptor of it; errors become one sentence."""
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputDirError(_dir_problem(path, exc)) from None
    if not _writable(fd):
        os.close(fd)
        raise OutputDirError(f"--output-dir {path!r} is not writable; give a folder you can "
                             f"write to.")
    return fd


def _writable(dir_fd: int) -> bool:
    probe = f".poprun-lite-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=dir_fd))
        os.unlink(probe, dir_fd=dir_fd)
        return True
    except OSError:
        return False


def _dir_problem(path: str, exc: OSError) -> str:
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        why = "a file is in the way (it or a folder above it is not a directory)"
    else:
        why = exc.strerror or str(exc)
    return f"--output-dir {path!r} cannot be used: {why}; give a folder you can write to."


class LogFiles:
    """``attempt-<n>/instance-<i>.<stream>.log`` below the output folder, created without ever
    following a symbolic link (a link planted there is replaced, its target left alone)."""

    def __init__(self, root_fd: int, root: str, attempt: int) -> None:
        name = f"attempt-{attempt}"
        self.folder = os.path.join(root, name)
        try:
            try:
                os.mkdir(name, 0o755, dir_fd=root_fd)
            except FileExistsError:
                if stat.S_ISLNK(os.lstat(name, dir_fd=root_fd).st_mode):
                    os.unlink(name, dir_fd=root_fd)  # a planted link: replaced, never followed
                    os.mkdir(name, 0o755, dir_fd=root_fd)
            self._dir = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=root_fd)
        except OSError as exc:
            raise OutputDirError(_dir_problem(self.folder, exc)) from None
        self._fds: Dict[str, int] = {}

    def fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=self._dir)
            except FileExistsError:  # an earlier run's file, or a planted link: replace it
                os.unlink(name, dir_fd=self._dir)
                fd = os.open(name, flags, 0o644, dir_fd=self._dir)
            self._fds[name] = fd
        return fd

    def write(self, name: str, data: bytes) -> None:
        write_all(self.fd(name), data)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        os.close(self._dir)


class Router:
    """Routes instance bytes to the console, the log files and the failure tails; from its start
    to ``close_all`` the launcher's own lines (``console.py``) go through it too."""

    def __init__(self, num_instances: int, options: OutputOptions,
                 logs: Optional[LogFiles] = None, console: Tuple[int, int] = (1, 2),
                 extra: Tuple[str, ...] = (), shown: Optional[Set[bytes]] = None) -> None:
        """``shown``: the start-up notices this job has shown (kept across its attempts)."""
        self.options = options
        # processes beside the instances (--evaluator), indices num_instances...: tagged and
        # logged by name, always shown on the console
        self._names = {num_instances + k: name for k, name in enumerate(extra)}
        num_instances += len(extra)
        self.logs = logs
        self._tags: Dict[int, str] = {}  # processes added while the job runs (Router.add)
        self._own_logs: Dict[int, Optional[LogFiles]] = {}
        self._added_hosts: Dict[int, str] = {}
        self._console = {STDOUT: console[0], STDERR: console[1]}
        self.reader_gone = False  # a console pipe's reader has gone (| head): the job stops
        self._tty = all(os.isatty(fd) for fd in console)
        self._partial: Dict[Tuple[int, str], List[bytes]] = {}
        self._tail_partial: Dict[Tuple[int, str], bytes] = {}
        self._tails: Dict[Tuple[int, str], Deque[str]] = {
            (i, s): collections.deque(maxlen=options.tail_lines)
            for i in range(num_instances) for s in (STDOUT, STDERR)}
        # start-up notices, quoted only when an instance wrote nothing else
        self._notice_tails: Dict[Tuple[int, str], Deque[str]] = {}
        self._closed: Set[Tuple[int, str]] = set()
        self._engines_quiet: Set[str] = set()  # engines whose lines are no longer shown
        self._twins = None if launcher_console.verbose else Twins(self._writers, shown)
        # Python's first exception line on each stderr ("RuntimeError: ..."), for the report: a
        # later traceback (a thread's, Python 3.13's longer ones) can push it out of the tail.
        self._in_traceback: Dict[int, bool] = {}
        self._first_errors: Dict[int, str] = {}
        self._open: Optional[Tuple[int, str]] = None  # whose line the terminal's cursor ends
        self._held: Dict[Tuple[int, str], _Held] = {}  # terminal: unfinished lines waiting
        self.stacks: Dict[int, str] = {}
        only = options.only_instance
        self._only = None if only is None else {only} if isinstance(only, int) else set(only)
        self._log_at_line_start: Dict[Tuple[int, str], bool] = {}
        if logs is not None:
            for i in range(num_instances):
                for stream in (STDOUT, STDERR):
                    logs.fd(f"{self.log_name(i)}.{stream}.log")
        launcher_console.attach(self.say)

    def _write_console(self, stream: str, data: bytes) -> None:
        """``data`` to the console's ``stream``, noting a reader that has gone."""
        if not write_all(self._console[stream], data):
            self.reader_gone = True

    def add(self, index: int, tag: str, logs: Optional[LogFiles] = None, host: str = "") -> None:
        """One more process, added while the job runs (an elastic worker on ``host``): tagged
        ``[tag]`` (``[tag@host]`` with tag_host) and logged as ``instance-<tag>.<stream>.log`` in
        ``logs`` (its round's folder; the caller closes it)."""
        self._tags[index] = tag
        self._added_hosts[index] = host
        self._own_logs[index] = logs
        for stream in (STDOUT, STDERR):
            self._tails[(index, stream)] = collections.deque(maxlen=self.options.tail_lines)
            self._closed.discard((index, stream))
            if logs is not None:
                logs.fd(f"{self.log_name(index)}.{stream}.log")

    def log_name(self, index: int) -> str:
        """``instance-<i>``, or the name of a process beside the instances (``evaluator``)."""
        return self._names.get(index) or f"instance-{self._tags.get(index, index)}"

    def _logs_of(self, index: int) -> Optional[LogFiles]:
        return self._own_logs[index] if index in self._own_logs else self.logs

    def _host(self, index: int) -> str:
        hosts = self.options.instance_hosts
        return self._added_hosts[index] if index in self._tags else \
            hosts[index] if index < len(hosts) else ""

    def _prefix(self, index: int, stream: str) -> bytes:
        return self._group_prefix((index,), stream)

    def _group_prefix(self, indices: Tuple[int, ...], stream: str) -> bytes:
        """The tag of a line several instances wrote alike: ``[0-3]``, ``[0,2@host]``."""
        stamp = timestamp() if self.options.timestamp else b""
        if not self.options.tag_output:
            return stamp
        hosts = {self._host(i) for i in indices}
        host = hosts.pop() if len(hosts) == 1 else ""
        where = f"@{host}" if self.options.tag_host and host else ""
        if any(i in self._names or i in self._tags for i in indices):
            tag = ",".join(str(self._names.get(i) or self._tags.get(i, i))
                           for i in sorted(indices))
        else:
            tag = instance_ranges(indices)
        return stamp + f"[{tag}{where}]<{stream}>:".encode()

    def _writers(self, stream: str) -> List[int]:
        """The instances whose ``stream`` is shown on the console and still open."""
        return [i for i, s in self._tails if s == stream and (i, s) not in self._closed
                and (self._only is None or i in self._only or i in self._names)]

    def _stamped(self, index: int, stream: str, data: bytes) -> bytes:
        """``data`` for the log file with the time at the start of every line."""
        key, stamp = (index, stream), timestamp()
        body = data[:-1].replace(b"\n", b"\n" + stamp) + data[-1:]
        if self._log_at_line_start.get(key, True):
            body = stamp + body
        self._log_at_line_start[key] = data.endswith(b"\n")
        return body

    def feed(self, index: int, stream: str, data: bytes) -> None:
        logs = self._logs_of(index)
        if logs is not None and data:
            logs.write(f"{self.log_name(index)}.{stream}.log",
                       self._stamped(index, stream, data) if self.options.timestamp else data)
        self._tail(index, stream, data)
        if self._only is not None and index not in self._only and index not in self._names:
            return
        if self._twins is None:
            self._to_console(index, stream, data)
        else:
            self._show(self._twins.feed(index, stream, data, time.monotonic()))

    def _to_console(self, index: int, stream: str, data: bytes) -> None:
        if self._tty:
            self._console_tty(index, stream, data)
        else:
            self._console_lines(index, stream, data)

    def _show(self, shown: List[Shown]) -> None:
        for item in shown:
            if not isinstance(item, Group):
                self._to_console(*item)
            elif len(item.indices) == 1:
                self._to_console(item.indices[0], item.stream, item.line)
            else:
                data = self._group_prefix(item.indices, item.stream) + item.line
                if self._tty and self._open is not None:
                    data = b"\n" + data  # leave the other instance's unfinished line as it is
                    self._partial.pop(self._open, None)
                    self._open = None
                self._write_console(item.stream, data)

    def _console_lines(self, index: int, stream: str, data: bytes) -> None:
        key = (index, stream)
        cut = data.rfind(b"\n") + 1
        if not cut:
            self._partial.setdefault(key, []).append(data)
            return
        head = self._partial.pop(key, None)
        complete = (b"".join(head) + data[:cut]) if head else data[:cut]
        if cut < len(data):
            self._partial[key] = [data[cut:]]
        prefix = self._prefix(index, stream)
        if prefix:
            complete = prefix + complete[:-1].replace(b"\n", b"\n" + prefix) + b"\n"
        self._write_console(stream, complete)

    def _console_tty(self, index: int, stream: str, data: bytes) -> None:
        key = (index, stream)
        held = self._held.get(key)
        now = time.monotonic()
        if held is not None and b"\n" not in data and b"\r" not in data:
            held.chunks.append(data)
            held.last = now
            return
        if held is not None:
            del self._held[key]
            data = b"".join(held.chunks) + data
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if rest and self._open != key and b"\r" not in rest:
            # an unfinished line that is no progress bar waits for its end, so that another
            # instance's output cannot split it (print(a, b) writes a, b and the \n apart)
            self._held[key] = _Held(held.first if held is not None else now, now, [rest])
            data = data[:cut]
            if not data:
                return
        self._show_tty(key, data)

    def _show_tty(self, key: Tuple[int, str], data: bytes) -> None:
        prefix = self._prefix(*key)
        out = []
        if self._open is not None and self._open != key:
            out.append(b"\n")  # leave the other instance's unfinished line as it is
            self._partial.pop(self._open, None)
            self._open = None
        if self._open is None:
            out.append(prefix)
        body = data
        if prefix:
            body = body.replace(b"\r", b"\r" + prefix)
            if body.endswith(b"\n"):
                body = body[:-1].replace(b"\n", b"\n" + prefix) + b"\n"
            else:
                body = body.replace(b"\n", b"\n" + prefix)
        out.append(body)
        self._open = None if data.endswith(b"\n") else key
        self._write_console(key[1], b"".join(out))

    @property
    def held_deadline(self) -> Optional[float]:
        """When the next unfinished line held back on the terminal must be shown (or None)."""
        deadlines = [h.deadline() for h in self._held.values()]
        if self._twins is not None and self._twins.deadline is not None:
            deadlines.append(self._twins.deadline)
        return min(deadlines) if deadlines else None

    def show_held(self, now: float) -> None:
        """Show the unfinished lines whose instance went quiet (a prompt) or that waited long,
        and the start-up lines that waited long enough for their twins."""
        if self._twins is not None:
            self._show(self._twins.due(now))
        for key, held in list(self._held.items()):
            if now >= held.deadline():
                del self._held[key]
                self._show_tty(key, b"".join(held.chunks))

    def _tail(self, index: int, stream: str, data: bytes) -> None:
        key = (index, stream)
        keep = self.options.tail_lines
        parts = data.split(b"\n")
        if len(parts) == 1:
            rest = self._tail_partial.get(key, b"") + data
            self._tail_partial[key] = rest[-TAIL_LINE_CHARS * 4:]
            return
        first = self._tail_partial.pop(key, b"") + parts[0]
        lines = [first] + parts[1:-1]
        if parts[-1]:
            self._tail_partial[key] = parts[-1][-TAIL_LINE_CHARS * 4:]
        if stream == STDERR and index not in self._first_errors:
            self._find_first_error(index, lines)
        for line in lines[-keep:]:
            if startup_lines.is_notice(line):
                self._notice_tails.setdefault(key, collections.deque(maxlen=keep)).append(
                    _readable(line))
            else:
                self._tails[key].append(_readable(line))

    def _find_first_error(self, index: int, lines: List[bytes]) -> None:
        """Remember the exception line that ends the first Python traceback on ``index``'s stderr
        (the first unindented line after "Traceback (most recent call last):")."""
        for line in lines:
            if line.startswith(b"Traceback (most recent call last):"):
                self._in_traceback[index] = True
            elif self._in_traceback.get(index) and line[:1] not in (b" ", b"\t", b""):
                self._first_errors[index] = _readable(line)
                return

    def first_error(self, index: int) -> Optional[str]:
        """The exception line of the first Python traceback ``index`` wrote to stderr, if any."""
        return self._first_errors.get(index)

    def close(self, index: int, stream: str) -> None:
        """The stream ended: an unfinished last line still reaches the console as a line."""
        key = (index, stream)
        self._closed.add(key)
        if self._twins is not None and (self._only is None or index in self._only
                                        or index in self._names):
            self._show(self._twins.closed(index, stream))
        rest = self._tail_partial.pop(key, b"")
        if rest:
            self._tails[key].append(_readable(rest))
        if self._tty:
            held = self._held.pop(key, None)
            if held is not None:
                self._show_tty(key, b"".join(held.chunks) + b"\n")
            elif self._open == key:
                self._write_console(stream, b"\n")
                self._open = None
            return
        head = self._partial.pop(key, None)
        if head:
            self._write_console(stream, self._prefix(index, stream) + b"".join(head) + b"\n")

    def tail(self, index: int, stream: str = STDERR) -> List[str]:
        """The last lines of ``index``'s ``stream``, less TensorFlow's start-up notices (those
        when it wrote nothing else to either stream)."""
        key = (index, stream)
        other = (index, STDOUT if stream == STDERR else STDERR)
        if self._tails[key] or self._tails.get(other):
            return list(self._tails[key])
        return list(self._notice_tails.get(key, ()))

    def add_stacks(self, index: int, text: str, reason: str) -> None:
        self.stacks[index] = text
        logs = self._logs_of(index)
        if logs is not None:
            logs.write(f"{self.log_name(index)}.stacks.log",
                       f"# {reason}\n{text or '(no Python stack)'}\n".encode())

    def engine_line(self, label: str, text: str, shown: bool = True,
                    noise: bool = False) -> None:
        """A line of an engine's own output (mpirun's, srun's): logged as ``<label>.log``, and
        on the console while ``shown`` (before the launcher decided how the job ends: its own
        lines explain the end then) or with -v; the first line left out says where they are.
        ``noise``: a line that says nothing about the job (the backend's ``engine_noise``),
        logged and shown only with -v."""
        if self.logs is not None:
            self.logs.write(f"{label}.log", (text + "\n").encode())
        if launcher_console.verbose or (shown and not noise):
            self.say(f"[{label}]: {text}")
        elif not noise and label not in self._engines_quiet:
            self._engines_quiet.add(label)
            where = f"; they are in {os.path.join(self.logs.folder, label + '.log')}" \
                if self.logs is not None else ""
            self.say(launcher_console.line(
                f"{label}'s own lines about the job's end are not shown (-v shows them){where}."))

    def say(self, message: str) -> None:
        """The launcher's own message, on stderr, never inside an instance's unfinished line."""
        if self._twins is not None:
            self._show(self._twins.release_all())  # the instances' lines before the launcher's
        data = message.encode() + b"\n"
        if self._open is not None:
            data = b"\n" + data
            self._open = None
        self._write_console(STDERR, data)

    def close_all(self) -> None:
        launcher_console.detach(self.say)
        if self._twins is not None:
            self._show(self._twins.release_all())
        for index, stream in list(self._tails):
            self.close(index, stream)
        if self.logs is not None:
            self.logs.close()
            self.logs = None


def _readable(line: bytes) -> str:
    """A line as the report quotes it: what a terminal shows after its last ``\\r``."""
    line = line.rstrip(b"\r")
    line = line[line.rfind(b"\r") + 1:]
    text = line.decode("utf-8", "replace")
    return text if len(text) <= TAIL_LINE_CHARS else text[:TAIL_LINE_CHARS] + " [...]"
