"""The launcher's end of the wrappers' connections: its listening sockets, and framed,
non-blocking reads and writes on every wrapper's connection, all on the supervisor's selector."""
from __future__ import annotations

import os
import selectors
import socket
from typing import List, Optional, Tuple

from popdist_launcher.wire import protocol as p

# The longest path a Linux Unix socket takes (sun_path's 108 bytes less the closing NUL).
UNIX_PATH_MAX = 107


class Conn:
    """One wrapper's connection; ``index`` is known once it proved it belongs to the job."""

    __slots__ = ("sock", "reader", "out", "index", "challenge", "closed", "timed_out")

    def __init__(self, sock: socket.socket, index: Optional[int] = None) -> None:
        self.sock = sock
        self.reader = p.FrameReader()
        self.out = bytearray()
        self.index = index
        self.challenge = b""
        self.closed = False
        self.timed_out = False  # the peer's host stopped answering (keepalive, user timeout)


class Hub:
    """Listeners and connections registered on ``sel`` with the keys ``("listen",)`` and
    ``("conn", conn)``; the supervisor's loop hands their events back here."""

    def __init__(self, sel: selectors.BaseSelector, backlog: int) -> None:
        self.sel = sel
        self.backlog = min(4096, max(128, backlog))
        self.conns: List[Conn] = []
        self.listeners: List[socket.socket] = []
        self.unix_dir: Optional[str] = None

    # ---- listening ----------------------------------------------------------------------------
    def listen_unix(self, tag: str) -> str:
        """A Unix socket in a private folder named after the launcher's pid and ``tag``: under
        $TMPDIR, or under /tmp where $TMPDIR is too deep for a socket's path."""
        name = f"poprun-lite-{os.getpid()}-{tag}"
        base = os.environ.get("TMPDIR") or "/tmp"
        if len(os.fsencode(os.path.join(base, name, "launcher.sock"))) > UNIX_PATH_MAX:
            base = "/tmp"
        folder = os.path.join(base, name)
        os.mkdir(folder, 0o700)
        self.unix_dir = folder
        path = os.path.join(folder, "launcher.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        self._listen(sock)
        return path

    def listen_tcp(self, address: str) -> Tuple[str, int]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((address, 0))
        self._listen(sock)
        return sock.getsockname()[:2]

    def _listen(self, sock: socket.socket) -> None:
        sock.listen(self.backlog)
        sock.setblocking(False)
        self.listeners.append(sock)
        self.sel.register(sock, selectors.EVENT_READ, ("listen",))

    def close_listeners(self, unix_only: bool = False) -> None:
        for sock in list(self.listeners):
            if unix_only and sock.family != socket.AF_UNIX:
                continue
            self.sel.unregister(sock)
            sock.close()
            self.listeners.remove(sock)
        if self.unix_dir is not None:
            try:
                os.unlink(os.path.join(self.unix_dir, "launcher.sock"))
            except OSError:
                pass
            try:
                os.rmdir(self.unix_dir)
            except OSError:
                pass
            self.unix_dir = None

    def accept(self, listener: socket.socket) -> None:
        """Take every waiting connection and send each its challenge."""
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:  # BlockingIOError: none left
                return
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                p.keep_alive(sock)
            conn = self.add(sock)
            conn.challenge = os.urandom(16)
            self.send(conn, p.CHALLENGE, conn.challenge)

    # ---- connections --------------------------------------------------------------------------
    def add(self, sock: socket.socket, index: Optional[int] = None) -> Conn:
        sock.setblocking(False)
        conn = Conn(sock, index)
        self.conns.append(conn)
        self.sel.register(sock, selectors.EVENT_READ, ("conn", conn))
        return conn

    def send(self, conn: Conn, kind: int, payload: bytes = b"") -> None:
        """Queue one frame; what the socket does not take now goes when it is writable."""
        if conn.closed:
            return
        data = p.frame(kind, payload)
        if not conn.out:
            try:
                n = conn.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                return  # its reader will see the end
            data = data[n:]
            if not data:
                return
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE,
                            ("conn", conn))
        conn.out += data

    def write(self, conn: Conn) -> None:
        try:
            n = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError:
            conn.out.clear()
            n = 0
        del conn.out[:n]
        if not conn.out and not conn.closed:
            self.sel.modify(conn.sock, selectors.EVENT_READ, ("conn", conn))

    def receive(self, conn: Conn) -> Optional[List[Tuple[int, bytes]]]:
        """The whole frames that arrived; None when the connection ended (it is closed)."""
        try:
            data = conn.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return []
        except TimeoutError:  # ETIMEDOUT: keepalive probes or sent data went unanswered
            conn.timed_out = True
            data = b""
        except OSError:
            data = b""
        if not data:
            self.close(conn)
            return None
        return conn.reader.feed(data)

    def close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.sel.unregister(conn.sock)
        conn.sock.close()

    def close_all(self) -> None:
        for conn in self.conns:
            self.close(conn)
        self.close_listeners()
