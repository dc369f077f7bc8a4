"""Processes of a job: start each instance in its own process group, route its output line by
line, and make sure nothing outlives the launcher, even when the launcher is killed with SIGKILL.
"""
from __future__ import annotations

import collections
import errno
import os
import signal
import subprocess
from typing import Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

STDOUT, STDERR = "stdout", "stderr"

# A tiny process that outlives nothing: it reads process-group ids from a pipe and, when the pipe
# closes without "done" (the launcher died, however it died), kills every group still listed.
# POSIX sh, because it must start in a millisecond and cost no memory.
_WATCHDOG = r"""
trap '' INT HUP TERM QUIT USR1 USR2 PIPE
groups=
gone=
while read -r line; do
  case "$line" in
    done) exit 0 ;;
    -*) gone="$gone ${line#-} " ;;
    *) groups="$groups $line" ;;
  esac
done
for g in $groups; do
  case "$gone" in *" $g "*) continue ;; esac
  kill -KILL "-$g" 2>/dev/null
done
exit 0
"""


class Watchdog:
    """Kills the job's process groups if the launcher dies before saying ``done``."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._fd = self._proc.stdin.fileno()

    def _send(self, line: str) -> None:
        try:
            os.write(self._fd, (line + "\n").encode())
        except OSError:
            pass

    def watch(self, pgid: int) -> None:
        self._send(str(pgid))

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def close(self) -> None:
        self._send("done")
        self._proc.stdin.close()
        self._proc.wait()


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


class Instance:
    """A started instance: its process, group, pidfd and exit status once reaped."""

    __slots__ = ("index", "proc", "pidfd", "returncode", "control", "started")

    def __init__(self, index: int, proc: subprocess.Popen, pidfd: int, control: bool = False) -> None:
        self.index = index
        self.proc = proc
        self.pidfd = pidfd
        self.returncode: Optional[int] = None
        # A remote session: signals travel as bytes on its stdin, and it has started once the
        # remote side wrote its start marker.
        self.control = control
        self.started = not control

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def send_signal(self, sig: int) -> None:
        """Signal the instance's process group, wherever it runs."""
        if not self.control or sig == signal.SIGKILL:
            # For a remote session, killing the ssh client ends the session: the remote side
            # kills its group on end of file.
            signal_group(self.proc.pid, sig)
            return
        try:
            os.write(self.proc.stdin.fileno(), bytes([sig]))
        except (OSError, ValueError):
            signal_group(self.proc.pid, signal.SIGKILL)

    def reap(self) -> int:
        """Collect the exit status (the pidfd said it exited), kill what is left of its group."""
        _, status = os.waitpid(self.proc.pid, 0)
        self.proc.returncode = self.returncode = os.waitstatus_to_exitcode(status)
        signal_group(self.proc.pid, signal.SIGKILL)  # no orphans left behind in the group
        os.close(self.pidfd)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.returncode


def start_instance(index: int, argv: Sequence[str], env: Mapping[str, str],
                   cwd: Optional[str] = None, control: bool = False) -> Instance:
    """Start one instance as leader of a new process group, stdout/stderr on pipes (and stdin
    too for a remote session's control channel)."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE if control else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        process_group=0,
        close_fds=True,
    )
    return Instance(index=index, proc=proc, pidfd=os.pidfd_open(proc.pid), control=control)


def exit_code_of(returncode: int) -> int:
    """Shell convention: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def write_all(fd: int, data: bytes) -> None:
    """Write the whole buffer in as few calls as possible (one, for anything up to a pipe's size)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            import select
            select.select([], [fd], [])
            continue
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                return
            raise
        view = view[n:]


class OutputOptions(NamedTuple):
    tag_output: bool = True
    only_instance: Optional[int] = None
    output_dir: Optional[str] = None
    tail_lines: int = 20


class OutputRouter:
    """Turns chunks read from instance pipes into whole lines: to the console (prefixed
    ``[i]<stdout>:`` when tagging), to per-instance log files, and into a tail kept for failure
    summaries. One writer thread, one write per batch of complete lines: lines never interleave."""

    def __init__(self, num_instances: int, options: OutputOptions,
                 console: Tuple[int, int] = (1, 2)) -> None:
        self.options = options
        self._console = {STDOUT: console[0], STDERR: console[1]}
        self._partial: Dict[Tuple[int, str], bytes] = {}
        self._tails: Dict[int, Deque[str]] = {
            i: collections.deque(maxlen=options.tail_lines) for i in range(num_instances)
        }
        self._files: Dict[Tuple[int, str], int] = {}
        if options.output_dir:
            os.makedirs(options.output_dir, exist_ok=True)
            for i in range(num_instances):
                for stream in (STDOUT, STDERR):
                    path = os.path.join(options.output_dir, f"instance-{i}.{stream}.log")
                    self._files[(i, stream)] = os.open(
                        path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def feed(self, index: int, stream: str, data: bytes) -> None:
        key = (index, stream)
        buf = self._partial.pop(key, b"") + data
        cut = buf.rfind(b"\n") + 1
        if cut < len(buf):
            self._partial[key] = buf[cut:]
        if cut:
            self._emit(index, stream, buf[:cut])

    def close(self, index: int, stream: str) -> None:
        """The stream ended: a last line without newline is still a line."""
        rest = self._partial.pop((index, stream), b"")
        if rest:
            self._emit(index, stream, rest + b"\n")

    def tail(self, index: int) -> List[str]:
        return list(self._tails[index])

    def _emit(self, index: int, stream: str, lines: bytes) -> None:
        fd = self._files.get((index, stream))
        if fd is not None:
            write_all(fd, lines)
        if stream == STDERR:
            self._tails[index].extend(
                line.decode("utf-8", "replace") for line in lines.splitlines())
        only = self.options.only_instance
        if only is not None and only != index:
            return
        if self.options.tag_output:
            prefix = f"[{index}]<{stream}>:".encode()
            lines = b"".join(prefix + line + b"\n" for line in lines.splitlines())
        write_all(self._console[stream], lines)

    def close_files(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files = {}
