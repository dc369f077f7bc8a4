"""One instance's supervision loop, in its wrapper: the program's output, exit, Python stacks,
progress reports and whereabouts go to the launcher; the launcher's signals, stdin, stack requests
and release come to the program (see instance.py for how the wrapper starts)."""
import _signal
import _socket
import os
import select
import time

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.spawned import placement
from popdist_launcher.wire.placement_text import PLACEMENT_ENV
from popdist_launcher.wire import protocol as p
from popdist_launcher.launcher.spawned.program import (PR_SET_CHILD_SUBREAPER, SIGKILL,
                                                       kill_descendants, killpg, prctl, spawn)

# Signals an engine (mpirun, srun, sshd) may send the wrapper; the launcher decides instead.
ENGINE_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT,
                  _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGALRM, _signal.SIGPIPE,
                  _signal.SIGTTIN, _signal.SIGTTOU)
CHUNK = 1 << 18
RELEASE_DRAIN_SECONDS = 2.0  # output still arriving after the job ended (a killed daemon's pipe)
DUMP_QUIET_SECONDS, DUMP_MAX_SECONDS = 0.2, 3.0
IN, OUT = select.EPOLLIN, select.EPOLLOUT


def dump_signal() -> int:
    """The signal the startup hook registers faulthandler on (one no library uses)."""
    return _signal.SIGRTMIN + 2


def _noop(signum, frame) -> None:
    pass


def program_state(pid: int) -> str:
    """ "STATE WORK": process ``pid``'s main thread's state letter (/proc/PID/stat: R running,
    S sleeping, D in an uninterruptible wait, T stopped, Z ended ...) and its work so far, CPU
    ticks plus characters read and written (/proc/PID/task/PID/stat and io; -1 when they
    cannot be read): a D that works between probes is I/O, not a hang. "?" when there is no
    such process."""
    task = f"/proc/{pid}/task/{pid}"
    try:
        with open(f"{task}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        state = fields[0].decode("ascii", "replace")
        work = int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return "?"
    try:
        with open(f"{task}/io", "rb") as io:
            work += sum(int(line.split()[1]) for line in io.read().splitlines()
                        if line.startswith((b"rchar:", b"wchar:")))
    except (OSError, IndexError, ValueError):
        work = -1
    return f"{state} {work}"


class Wrapper:
    def __init__(self, sock, spec: dict, reader: p.FrameReader, forked: bool) -> None:
        self.sock = sock
        self.forked = forked
        self.spec = spec
        self.poll = select.epoll()
        self.what: dict = {}  # fd -> what it is
        self.reader = reader
        self.pid: "int | None" = None
        self.returncode: "int | None" = None
        self.stdin_fd: "int | None" = None
        self.pipes = 0
        self.mid_line = False  # the program's stderr so far ends inside a line
        self.released: "float | None" = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.stack_r: "int | None" = None
        self.stack_text = bytearray()
        self.stack_ctl = bytearray()
        self.dumpable = False
        self.dump_due: "float | None" = None
        self.dump_until = 0.0

    def watch(self, fd: int, what, events: int = IN) -> None:
        self.what[fd] = what
        self.poll.register(fd, events)

    def unwatch(self, fd: int) -> None:
        if self.what.pop(fd, None) is not None:
            self.poll.unregister(fd)

    # ---- talking to the launcher -----------------------------------------------------------
    def send(self, kind: int, payload: bytes = b"") -> None:
        try:
            self.sock.sendall(p.frame(kind, payload))
        except OSError:
            self.launcher_gone()

    def launcher_gone(self) -> None:
        """The launcher died or dropped us: nothing this wrapper started may outlive it."""
        self.kill_program(SIGKILL)
        kill_descendants()
        os._exit(1)

    # ---- the program ---------------------------------------------------------------------
    def start(self) -> None:
        spec = self.spec
        env = dict(os.environ)
        env.update(spec["env"])
        env.pop(p.SECRET_ENV, None)
        for name in env.pop(p.UNSET_ENV, "").split():
            env.pop(name, None)
        placing = env.pop(PLACEMENT_ENV, "")
        if placing:
            self.place(placing, env)
        stack_r, stack_w = os.pipe()
        env[p.STACK_FD_ENV] = f"{stack_w}:{os.getpid()}:{dump_signal()}"
        libc_prctl = prctl()
        libc_prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        try:
            self.pid, self.stdin_fd, out_r, err_r = spawn(
                spec["argv"], env, bool(spec.get("stdin")), stack_w,
                None if self.forked else libc_prctl)
        except OSError as exc:
            os.close(stack_r)
            os.close(stack_w)
            message = console.line(f"could not start {spec['argv'][0]!r} on "
                                   f"{os.uname().nodename}: {exc.strerror or exc}.")
            self.send(p.STDERR, f"{message}\n".encode())
            self.returncode = 126 if isinstance(exc, PermissionError) else 127
            self.send(p.EXIT, str(self.returncode).encode())
            return
        os.close(stack_w)
        self.stack_r = stack_r
        os.set_blocking(stack_r, False)
        self.watch(stack_r, "stacks")
        for fd, kind in ((out_r, p.STDOUT), (err_r, p.STDERR)):
            os.set_blocking(fd, False)
            self.watch(fd, kind)
            self.pipes += 1
        if self.stdin_fd is not None:
            os.set_blocking(self.stdin_fd, False)
        self.send(p.STARTED, str(self.pid).encode())

    def place(self, text: str, env: dict) -> None:
        """Bind this wrapper to the instance's CPUs (the program inherits the binding) and add
        its thread budget and GPUs to ``env`` (see placement.py)."""
        host = os.uname().nodename
        lines = []
        try:
            placed = placement.place(text, env, os.sched_getaffinity(0), host=host)
            if placed.cpus is not None:
                os.sched_setaffinity(0, placed.cpus)
            env.update(placed.env)
            lines = placed.notes + [placed.report]
        except (OSError, ValueError) as exc:
            lines = [console.line(f"warning: could not place the instance on {host} ({exc}); "
                                  f"it runs unbound with the environment it was given.")]
        for line in lines:
            if line:
                self.send(p.STDERR, f"{line}\n".encode())

    def kill_program(self, sig: int) -> None:
        if self.pid is not None and self.returncode is None:
            killpg(self.pid, sig)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid and self.returncode is None:
                self.program_exited(os.waitstatus_to_exitcode(status))

    def program_exited(self, returncode: int) -> None:
        # What it wrote before it exited is in its pipes now: send that before the exit status.
        for fd, what in list(self.what.items()):
            if what in (p.STDOUT, p.STDERR):
                self.read_pipe(fd, what, until_empty=True)
        killpg(self.pid, SIGKILL)  # whatever it left in its group goes too
        self.returncode = returncode
        self.close_stdin()
        self.send(p.EXIT, str(returncode).encode())

    def close_stdin(self) -> None:
        if self.stdin_fd is not None:
            self.unwatch(self.stdin_fd)
            os.close(self.stdin_fd)
            self.stdin_fd = None
        self.stdin_buf.clear()

    def read_pipe(self, fd: int, kind: int, until_empty: bool = False) -> None:
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.unwatch(fd)
                os.close(fd)
                self.pipes -= 1
                return
            self.send(kind, data)
            if kind == p.STDERR:
                self.mid_line = not data.endswith(b"\n")
            if not until_empty:
                return

    # ---- stack dumps -----------------------------------------------------------------------
    def read_stacks(self) -> None:
        try:
            data = os.read(self.stack_r, CHUNK)
        except BlockingIOError:
            return
        if not data:
            self.unwatch(self.stack_r)
            os.close(self.stack_r)
            self.stack_r = None
            return
        if self.dump_due is not None:
            self.dump_due = min(self.dump_until, time.monotonic() + DUMP_QUIET_SECONDS)
        # faulthandler's text never holds a NUL; the program's own messages start with one.
        data = bytes(self.stack_ctl) + data
        self.stack_ctl.clear()
        while data:
            at = data.find(b"\0")
            if at < 0:
                self.stack_text += data
                break
            self.stack_text += data[:at]
            end = data.find(b"\n", at)
            if end < 0:
                self.stack_ctl += data[at:]
                break
            message, data = data[at:end + 1], data[end + 1:]
            if message == p.STACK_READY:
                self.dumpable = True
            elif message.startswith(p.STACK_STALL):
                if self.stack_text:
                    self.send(p.STACKS, bytes(self.stack_text))
                    self.stack_text.clear()
                self.send(p.STALL, message[len(p.STACK_STALL):].rstrip(b"\n"))
            elif message.startswith(p.STACK_PROGRESS):
                self.send(p.PROGRESS, message[len(p.STACK_PROGRESS):].rstrip(b"\n"))
            elif message.startswith(p.STACK_WHERE):
                self.send(p.WHERE, message[len(p.STACK_WHERE):].rstrip(b"\n"))

    def dump(self) -> None:
        """Ask the program for its stacks; they are sent once its dump went quiet."""
        if self.dumpable and self.pid is not None and self.returncode is None:
            try:
                os.kill(self.pid, dump_signal())
            except ProcessLookupError:
                pass
            now = time.monotonic()
            self.dump_until = now + DUMP_MAX_SECONDS
            self.dump_due = now + DUMP_QUIET_SECONDS * 2
        else:
            self.send(p.STACKS, bytes(self.stack_text))
            self.stack_text.clear()

    # ---- frames from the launcher -------------------------------------------------------------
    def on_frames(self, data: "bytes | None" = None) -> None:
        if data is None:
            try:
                data = self.sock.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                self.launcher_gone()
        for kind, payload in self.reader.feed(data):
            if kind == p.SIGNAL:
                self.kill_program(payload[0])
            elif kind == p.STDIN:
                self.stdin_buf += payload
                self.write_stdin()
            elif kind == p.STDIN_EOF:
                self.stdin_eof = True
                self.write_stdin()
            elif kind == p.DUMP:
                self.dump()
            elif kind == p.RELEASE:
                self.released = time.monotonic()
                self.kill_program(SIGKILL)
                kill_descendants()
            elif kind == p.CUT_PEERS:
                self.cut_peers(payload)
            elif kind == p.PROBE:
                self.send(p.PROBED, self.process_state().encode())

    def process_state(self) -> str:
        """The program's answer to a probe (``program_state``); "?" when it has ended."""
        if self.pid is None or self.returncode is not None:
            return "?"
        return program_state(self.pid)

    def cut_peers(self, payload: bytes) -> None:
        """A worker of the job failed: make the program's pending collective fail now by
        shutting down its connections to the job's workers (see peer_sockets.py)."""
        if self.pid is None or self.returncode is not None:
            return
        from popdist_launcher.launcher.spawned import peer_sockets
        host = os.uname().nodename
        try:
            count = peer_sockets.cut(self.pid, payload)
        except OSError as exc:
            line = console.line(f"{host}: warning: could not shut down the program's "
                                f"connections to the job's workers ({exc.strerror or exc}; "
                                f"pidfd_getfd needs Linux >= 5.6 and the right to trace the "
                                f"program): a collective blocked on a failed peer waits out "
                                f"HOROVOD_GLOO_TIMEOUT_SECONDS.")
        else:
            if not count:  # none left (its collective failed already), or none to its peers
                return
            line = console.line(f"{host}: a worker of the job failed: shut down {count} "
                                f"connection(s) of the program to the job's workers.")
        self.send(p.STDERR, (("\n" if self.mid_line else "") + f"{line}\n").encode())
        self.mid_line = False

    def write_stdin(self) -> None:
        fd = self.stdin_fd
        if fd is None:
            self.stdin_buf.clear()
            return
        while self.stdin_buf:
            try:
                n = os.write(fd, self.stdin_buf)
            except BlockingIOError:
                break
            except OSError:  # the program closed its stdin
                self.close_stdin()
                return
            del self.stdin_buf[:n]
        if self.stdin_buf and fd not in self.what:
            self.watch(fd, "stdin", OUT)
        elif not self.stdin_buf:
            self.unwatch(fd)
            if self.stdin_eof:
                self.close_stdin()

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        _signal.signal(_signal.SIGCHLD, _noop)
        self.watch(wake_r, "wake")
        self.watch(self.sock.fileno(), "sock")
        self.start()
        self.on_frames(b"")  # what came with the spec (stdin already, a signal)
        self.reap()
        while True:
            now = time.monotonic()
            if self.released is not None and (self.pipes == 0 or
                                              now > self.released + RELEASE_DRAIN_SECONDS):
                break
            if self.dump_due is not None and now >= self.dump_due:
                self.dump_due = None
                self.send(p.STACKS, bytes(self.stack_text))
                self.stack_text.clear()
            deadlines = [d for d in (self.dump_due, self.released and
                                     self.released + RELEASE_DRAIN_SECONDS) if d]
            timeout = max(0.0, min(deadlines) - now) if deadlines else -1
            try:
                events = self.poll.poll(timeout)
            except InterruptedError:
                continue
            for fd, _ in events:
                what = self.what.get(fd)
                if what in (p.STDOUT, p.STDERR):
                    self.read_pipe(fd, what)
                elif what == "sock":
                    self.on_frames()
                elif what == "wake":
                    try:
                        os.read(wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self.reap()
                elif what == "stacks":
                    self.read_stacks()
                elif what == "stdin":
                    self.write_stdin()
        kill_descendants()
        try:
            self.sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        return 0


def serve(sock, spec: dict, reader: "p.FrameReader | None" = None, forked: bool = False) -> int:
    """Run ``spec`` under this process's supervision, reporting over ``sock`` (a connected
    socket; ``reader`` holds what already arrived after the spec; ``forked``: this process is a
    fork of the launcher)."""
    for sig in ENGINE_SIGNALS:
        _signal.signal(sig, _noop)  # caught, not ignored: the program gets the defaults at exec
    sock.setblocking(True)
    return Wrapper(sock, spec, reader or p.FrameReader(), forked).run()
