"""Free TCP ports for TF_CONFIG, reserved so that neither other launchers nor the kernel take them.

TensorFlow's gRPC server binds without SO_REUSEPORT, so a port cannot stay held while it binds.
Instead ports are drawn from outside the kernel's ephemeral range (outgoing connections never get
them), each is locked host-wide with flock for the job's lifetime (other poprun-lite jobs skip it),
and each is proven free by binding it; a port found taken is replaced by another.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from typing import List, Optional, Tuple

from popdist_launcher._say import debug

FALLBACK_RANGE = (20000, 32767)


class PortError(OSError):
    """No port could be reserved; the message names the address."""


def candidate_range() -> Tuple[int, int]:
    """Ports below the kernel's ephemeral range (or above it when there is no room below)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return FALLBACK_RANGE
    if low - 1 - 10000 >= 1024:
        return (max(1024, low - 12768), low - 1)
    if high < 65535 - 1000:
        return (high + 1, 65535)
    return FALLBACK_RANGE


def _lock_dir() -> str:
    tmp = os.environ.get("TMPDIR") or "/tmp"
    path = os.path.join(tmp, f"poprun-lite-ports-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _probe_bind(address: str, port: int) -> Optional[socket.socket]:
    """Bind like TensorFlow does (wildcard, dual stack); None when the port is taken."""
    wildcard = address in ("", "0.0.0.0", "::")
    family = socket.AF_INET6 if socket.has_ipv6 and (wildcard or ":" in address) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::" if wildcard else address, port))
        else:
            sock.bind(("0.0.0.0" if wildcard else address, port))
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return None
        if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
            return _probe_bind("0.0.0.0", port)
        raise


class PortReservation:
    """Ports locked for this job; ``release_binds`` lets the instances bind them."""

    def __init__(self, ports: List[int], locks: List[int], sockets: List[socket.socket]):
        self.ports = ports
        self._locks = locks
        self._sockets = sockets

    def release_binds(self) -> None:
        """Unbind the probe sockets (just before instances start); the host-wide locks stay."""
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def close(self) -> None:
        self.release_binds()
        for fd in self._locks:
            os.close(fd)
        self._locks = []

    def __enter__(self) -> "PortReservation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reserve(count: int, address: str = "", attempts: int = 200,
            port_range: Optional[Tuple[int, int]] = None) -> PortReservation:
    """Reserve ``count`` distinct free ports on ``address`` (wildcard by default)."""
    low, high = port_range or candidate_range()
    lock_dir = _lock_dir()
    ports: List[int] = []
    locks: List[int] = []
    sockets: List[socket.socket] = []
    tried = 0
    last_taken = None
    while len(ports) < count:
        if tried >= attempts:
            for s in sockets:
                s.close()
            for fd in locks:
                os.close(fd)
            shown = address or "0.0.0.0"
            raise PortError(
                f"could not reserve {count} free TCP port(s) on {shown} in {low}..{high} after "
                f"{attempts} tries (last taken: {shown}:{last_taken}); free some ports or pass "
                f"another range with --port-range LOW-HIGH."
            )
        tried += 1
        port = low + int.from_bytes(os.urandom(4), "little") % (high - low + 1)
        if port in ports:
            continue
        fd = os.open(os.path.join(lock_dir, str(port)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            last_taken = port
            debug("port %d is locked by another poprun-lite job", port)
            continue
        sock = _probe_bind(address, port)
        if sock is None:
            os.close(fd)
            last_taken = port
            debug("port %d is in use, trying another", port)
            continue
        ports.append(port)
        locks.append(fd)
        sockets.append(sock)
    return PortReservation(ports, locks, sockets)


def listen_socket(address: str) -> socket.socket:
    """A listening socket on a kernel-chosen port (for the rendezvous), bound before any spawn."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, 0))
    except OSError as exc:
        sock.close()
        raise PortError(f"cannot listen on {address}: {exc.strerror}; check --network address.") from None
    sock.listen(128)
    return sock
