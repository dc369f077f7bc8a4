"""The per-instance wrapper: runs one instance's program and reports everything to the launcher.

    python -m popdist_launcher.launcher.spawned.instance --connect ADDR[,ADDR...]
        (--index N | --rank-from VAR) [--timeout S] [--secret-stdin]

ADDR is ``unix:PATH`` or ``tcp:HOST:PORT`` (tried in order). The wrapper proves it belongs to the
job (HMAC of the launcher's challenge with the job secret, read from POPRUN_JOB_SECRET or, with
--secret-stdin, the first line of stdin), then receives what to run. The launcher starts wrappers
on its own host by forking itself and calling :func:`serve` (no interpreter start).

The program runs in a process group of its own, with this wrapper as a child subreaper (so
descendants that escaped with setsid() come back to it when orphaned). The wrapper sends the
program's pid, its stdout and stderr as raw bytes, its Python stacks on request (see
``popdist_launcher.stack_dump``) and its exact exit code or signal; it delivers the signals the
launcher sends; when the program exits, what is left in its group is killed; when the launcher
says the job is over (RELEASE) every descendant is killed and the wrapper exits 0 whatever the
program did, so an engine such as mpirun never ends the job by itself. Signals from an engine
are ignored: only the launcher decides. If the connection to the launcher drops (the launcher
died), everything the wrapper started is killed at once.

Standard library only, no json or typing (they cost 10 and 35 ms): it starts once per instance.
"""
from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from popdist_launcher.launcher.spawned import protocol as p

# Signals an engine (mpirun, srun, sshd) may send the wrapper; the launcher decides instead.
ENGINE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE, signal.SIGTTIN, signal.SIGTTOU)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
CHUNK = 1 << 18
RELEASE_DRAIN_SECONDS = 2.0  # output still arriving after the job ended (a killed daemon's pipe)
DUMP_QUIET_SECONDS, DUMP_MAX_SECONDS = 0.2, 3.0


def dump_signal() -> int:
    """The signal the startup hook registers faulthandler on (one no library uses)."""
    return signal.SIGRTMIN + 2


def _prctl():
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl


def _noop(signum, frame) -> None:
    pass


class Wrapper:
    def __init__(self, sock: socket.socket, spec: dict, reader: p.FrameReader) -> None:
        self.sock = sock
        self.spec = spec
        self.sel = selectors.DefaultSelector()
        self.reader = reader
        self.proc: "subprocess.Popen | None" = None
        self.returncode: "int | None" = None
        self.pipes = 0
        self.released: "float | None" = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.stack_r: "int | None" = None
        self.stack_text = bytearray()
        self.stack_ctl = bytearray()
        self.dumpable = False
        self.dump_due: "float | None" = None
        self.dump_until = 0.0

    # ---- talking to the launcher -----------------------------------------------------------
    def send(self, kind: int, payload: bytes = b"") -> None:
        try:
            self.sock.sendall(p.frame(kind, payload))
        except OSError:
            self.launcher_gone()

    def launcher_gone(self) -> None:
        """The launcher died or dropped us: nothing this wrapper started may outlive it."""
        self.kill_program(signal.SIGKILL)
        kill_descendants()
        os._exit(1)

    # ---- the program ---------------------------------------------------------------------
    def start(self) -> None:
        spec = self.spec
        env = dict(os.environ)
        env.update(spec["env"])
        env.pop(p.SECRET_ENV, None)
        stack_r, stack_w = os.pipe()
        os.set_inheritable(stack_w, True)
        env[p.STACK_FD_ENV] = f"{stack_w}:{os.getpid()}:{dump_signal()}"
        prctl = _prctl()
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        try:
            self.proc = subprocess.Popen(
                spec["argv"], env=env, stdin=subprocess.PIPE if spec.get("stdin") else
                subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                process_group=0, pass_fds=(stack_w,),
                preexec_fn=lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
        except OSError as exc:
            os.close(stack_r)
            os.close(stack_w)
            where = os.uname().nodename
            message = f"poprun-lite: could not start {spec['argv'][0]!r} on {where}: " \
                      f"{exc.strerror or exc}.\n"
            self.send(p.STDERR, message.encode())
            self.returncode = 126 if isinstance(exc, PermissionError) else 127
            self.send(p.EXIT, str(self.returncode).encode())
            return
        os.close(stack_w)
        self.stack_r = stack_r
        os.set_blocking(stack_r, False)
        self.sel.register(stack_r, selectors.EVENT_READ, "stacks")
        for pipe, kind in ((self.proc.stdout, p.STDOUT), (self.proc.stderr, p.STDERR)):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, kind)
            self.pipes += 1
        if self.proc.stdin is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)
        self.send(p.STARTED, str(self.proc.pid).encode())

    def kill_program(self, sig: int) -> None:
        if self.proc is not None and self.returncode is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.proc is not None and pid == self.proc.pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.program_exited(self.proc.returncode)

    def program_exited(self, returncode: int) -> None:
        # What it wrote before it exited is in its pipes now: send that before the exit status.
        for key in list(self.sel.get_map().values()):
            if key.data in (p.STDOUT, p.STDERR):
                self.read_pipe(key.fd, key.data, until_empty=True)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever it left in its group goes too
        except (ProcessLookupError, PermissionError):
            pass
        self.returncode = returncode
        stdin = self.proc.stdin
        if stdin is not None and not stdin.closed:
            if stdin.fileno() in self.sel.get_map():
                self.sel.unregister(stdin.fileno())
            self.stdin_buf.clear()
            try:
                stdin.close()
            except OSError:
                pass
        self.send(p.EXIT, str(returncode).encode())

    def read_pipe(self, fd: int, kind: int, until_empty: bool = False) -> None:
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(fd)
                os.close(fd)
                self.pipes -= 1
                return
            self.send(kind, data)
            if not until_empty:
                return

    # ---- stack dumps -----------------------------------------------------------------------
    def read_stacks(self) -> None:
        try:
            data = os.read(self.stack_r, CHUNK)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(self.stack_r)
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
                self.send(p.DUMPABLE)
            elif message.startswith(p.STACK_STALL):
                if self.stack_text:
                    self.send(p.STACKS, bytes(self.stack_text))
                    self.stack_text.clear()
                self.send(p.STALL, message[len(p.STACK_STALL):].rstrip(b"\n"))

    def dump(self) -> None:
        """Ask the program for its stacks; they are sent once its dump went quiet."""
        if self.dumpable and self.proc is not None and self.returncode is None:
            try:
                os.kill(self.proc.pid, dump_signal())
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
                self.kill_program(signal.SIGKILL)
                kill_descendants()

    def write_stdin(self) -> None:
        stdin = self.proc.stdin if self.proc is not None else None
        if stdin is None or stdin.closed:
            self.stdin_buf.clear()
            return
        fd = stdin.fileno()
        while self.stdin_buf:
            try:
                n = os.write(fd, self.stdin_buf)
            except BlockingIOError:
                break
            except OSError:  # the program closed its stdin
                self.stdin_buf.clear()
                break
            del self.stdin_buf[:n]
        registered = fd in self.sel.get_map()
        if self.stdin_buf and not registered:
            self.sel.register(fd, selectors.EVENT_WRITE, "stdin")
        elif not self.stdin_buf:
            if registered:
                self.sel.unregister(fd)
            if self.stdin_eof:
                stdin.close()

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _noop)
        self.sel.register(wake_r, selectors.EVENT_READ, "wake")
        self.sel.register(self.sock, selectors.EVENT_READ, "sock")
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
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            for key, _ in self.sel.select(timeout):
                what = key.data
                if what in (p.STDOUT, p.STDERR):
                    self.read_pipe(key.fd, what)
                elif what == "sock":
                    self.on_frames()
                elif what == "wake":
                    try:
                        wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    self.reap()
                elif what == "stacks":
                    self.read_stacks()
                elif what == "stdin":
                    self.write_stdin()
        kill_descendants()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        return 0


def kill_descendants(timeout: float = 5.0) -> None:
    """SIGKILL every process below this one. As a child subreaper it inherits the orphans of
    what it kills, so repeat until it has no children left."""
    me = os.getpid()
    own_group = os.getpgid(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _children(me)
        if not kids:
            return
        for kid in kids:
            try:
                group = os.getpgid(kid)
                if group != own_group:
                    os.killpg(group, signal.SIGKILL)
                os.kill(kid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break


def _children(pid: int) -> "list[int]":
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def serve(sock: socket.socket, spec: dict, reader: "p.FrameReader | None" = None) -> int:
    """Run ``spec`` under this process's supervision, reporting over ``sock`` (``reader`` holds
    what already arrived after the spec)."""
    for sig in ENGINE_SIGNALS:
        signal.signal(sig, _noop)  # caught, not ignored: the program gets the defaults at exec
    sock.setblocking(True)
    return Wrapper(sock, spec, reader or p.FrameReader()).run()


def connect(addresses: "list[str]", timeout: float) -> socket.socket:
    problems = []
    for address in addresses:
        kind, _, rest = address.partition(":")
        try:
            if kind == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(rest)
            else:
                host, _, port = rest.rpartition(":")
                sock = socket.create_connection((host, int(port)), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc}")
    _fail(f"cannot reach the launcher ({'; '.join(problems)}); check that this host can "
          f"connect to the launcher's host (--host-subnet, --network-interface).")


def _recv_frame(sock: socket.socket, reader: p.FrameReader, want: int) -> bytes:
    """The next frame of kind ``want`` (frames after it stay in ``reader``)."""
    data = b""
    while True:
        found = reader.take(data)
        while found is not None:
            if found[0] == want:
                return found[1]
            found = reader.take()
        data = sock.recv(CHUNK)
        if not data:
            if want == p.RELEASE:
                return b""
            _fail("the launcher closed the connection before the instance started.")


def _fail(message: str) -> "NoReturn":  # noqa: F821
    sys.stderr.write(f"poprun-lite: {os.uname().nodename}: {message}\n")
    sys.stderr.flush()
    os._exit(1)


def main(args: "list[str] | None" = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    addresses: "list[str]" = []
    index: "int | None" = None
    timeout, secret_stdin = 120.0, False
    while args:
        flag = args.pop(0)
        if flag == "--connect":
            addresses = args.pop(0).split(",")
        elif flag == "--index":
            index = int(args.pop(0))
        elif flag == "--rank-from":
            var = args.pop(0)
            rank = os.environ.get(var, "")
            if not rank.isdigit():
                _fail(f"cannot tell which instance this is: {var}={rank!r}; start it through "
                      f"poprun-lite.")
            index = int(rank)
        elif flag == "--timeout":
            timeout = float(args.pop(0))
        elif flag == "--secret-stdin":
            secret_stdin = True
        else:
            _fail(f"internal: unknown wrapper option {flag!r}.")
    if secret_stdin:
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(0, 1)
            if not chunk:
                break
            line += chunk
        secret = line.strip()
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    else:
        secret = os.environ.pop(p.SECRET_ENV, "").encode()
    if index is None or not addresses or not secret:
        _fail("internal: the wrapper needs --connect, --index or --rank-from, and the job secret.")
    sock = connect(addresses, timeout)
    reader = p.FrameReader()
    challenge = _recv_frame(sock, reader, p.CHALLENGE)
    hello = f"{index} {p.mac(secret, challenge, index)} {os.uname().nodename} {os.getpid()}"
    sock.sendall(p.frame(p.HELLO, hello.encode()))
    spec = p.decode_spec(_recv_frame(sock, reader, p.SPEC))
    sock.settimeout(None)
    if spec.get("cwd"):
        try:
            os.chdir(spec["cwd"])
        except OSError as exc:
            message = (f"poprun-lite: working directory {spec['cwd']!r} does not exist on "
                       f"{os.uname().nodename} ({exc.strerror}); run poprun-lite from a "
                       f"directory every host has.\n")
            sock.sendall(p.frame(p.STDERR, message.encode()) + p.frame(p.EXIT, b"1"))
            spec = dict(spec, argv=None)
    if spec.get("argv") is None:  # nothing to run: wait for the launcher to let go
        _recv_frame(sock, reader, p.RELEASE)
        return 0
    return serve(sock, spec, reader)


if __name__ == "__main__":
    sys.exit(main())
