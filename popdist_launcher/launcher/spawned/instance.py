"""The per-instance wrapper's start: reach the launcher, prove the job's secret, receive what to
run, then supervise it (``wrapper.serve``; its processes: ``program.py``).

    python -m popdist_launcher.launcher.spawned.instance --connect ADDR[,ADDR...]
        (--index N | --rank-from VAR) [--timeout S] [--secret-stdin]

ADDR is ``unix:PATH`` or ``tcp:HOST:PORT`` (tried in order). The wrapper proves it belongs to the
job (HMAC of the launcher's challenge with the job secret, read from POPRUN_JOB_SECRET or, with
--secret-stdin, the first line of stdin), then receives what to run. The launcher starts wrappers
on its own host by forking itself and calling ``wrapper.serve`` (no interpreter start).

The program runs in a process group of its own, with this wrapper as a child subreaper (so
descendants that escaped with setsid() come back to it when orphaned). The wrapper sends the
program's pid, its stdout and stderr as raw bytes, its Python stacks on request (see
``popdist_launcher.stack_dump``) and its exact exit code or signal; it delivers the signals the
launcher sends; when the program exits, what is left in its group is killed; when the launcher
says the job is over (RELEASE) every descendant is killed and the wrapper exits 0 whatever the
program did, so an engine such as mpirun never ends the job by itself. Signals from an engine
are ignored: only the launcher decides. If the connection to the launcher drops (the launcher
died), everything the wrapper started is killed at once.

It starts once per instance, so it imports only what costs nothing: the C modules behind signal,
socket and selectors (whose Python layers import enum, 15 ms), no subprocess (15 ms: the program
is forked and executed here), no json, typing or __future__ (its annotations hold at run time).
"""
import _socket
import os
import sys

from popdist_launcher.launcher.output import console
from popdist_launcher.wire import protocol as p
from popdist_launcher.launcher.spawned.wrapper import CHUNK, serve


def connect(addresses: "list[str]", timeout: float):
    problems = []
    for address in addresses:
        kind, _, rest = address.partition(":")
        try:
            if kind == "unix":
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(rest)
            else:
                host, _, port = rest.rpartition(":")
                family, kind_, proto, _, where = _socket.getaddrinfo(
                    host, int(port), 0, _socket.SOCK_STREAM)[0]
                sock = _socket.socket(family, kind_, proto)
                sock.settimeout(timeout)
                sock.connect(where)
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                p.keep_alive(sock)
            return sock
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc}")
    _fail(f"cannot reach the launcher ({'; '.join(problems)}); check that this host can "
          f"connect to the launcher's host (--host-subnet, --network-interface).")


def _recv_frame(sock, reader: p.FrameReader, want: int) -> bytes:
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
    console.say(f"{os.uname().nodename}: {message}")
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
    own = os.urandom(16)
    hello = f"{index} {p.mac(secret, challenge, index)} {os.uname().nodename} {os.getpid()} " \
            f"{own.hex()}"
    sock.sendall(p.frame(p.HELLO, hello.encode()))
    payload = _recv_frame(sock, reader, p.SPEC)
    if not p.mac_ok(secret, p.LAUNCHER_PROOF + own, index, payload[:p.MAC_SIZE].decode("ascii",
                                                                                      "replace")):
        _fail("the peer at the launcher's address does not know the job's secret; refusing to "
              "run what it sends.")
    spec = p.decode_spec(payload[p.MAC_SIZE:])
    sock.settimeout(None)
    if spec.get("cwd"):
        try:
            os.chdir(spec["cwd"])
        except OSError as exc:
            message = console.line(f"working directory {spec['cwd']!r} does not exist on "
                                   f"{os.uname().nodename} ({exc.strerror}); run poprun-lite "
                                   f"from a directory every host has.")
            sock.sendall(p.frame(p.STDERR, f"{message}\n".encode()) + p.frame(p.EXIT, b"1"))
            spec = dict(spec, argv=None)
    if spec.get("argv") is None:  # nothing to run: wait for the launcher to let go
        _recv_frame(sock, reader, p.RELEASE)
        return 0
    return serve(sock, spec, reader)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing left to finalize: mpirun sees the rank end without the teardown
