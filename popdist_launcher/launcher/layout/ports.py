"""Free TCP ports for TF_CONFIG, reserved so that neither other launchers nor the kernel take them.

TensorFlow's gRPC server binds without SO_REUSEPORT, so a port cannot stay held while it binds.
Instead ports are drawn from outside the kernel's ephemeral range (outgoing connections never get
them), each is locked host-wide with flock for the job's lifetime (other poprun-lite jobs skip it),
and each is proven free by binding it; a port found taken is replaced by another.

The lock files live in a folder of the user's own (``$TMPDIR/poprun-lite-ports-<uid>``); a folder
there that someone else owns or can write to is refused, and lock files are opened without
following symlinks, so another local user can neither redirect nor block the locks.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from typing import List, Optional, Tuple

from popdist_launcher.launcher.output.console import debug

FALLBACK_RANGE = (20000, 32767)
# File descriptors the launcher may need per local instance: its port's lock file and probe
# socket, then the instance's output pipes and control channels.
FDS_PER_INSTANCE = 8


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


def lock_dir() -> str:
    """This user's folder of port lock files, created if needed; PortError if it is not safe."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    path = os.path.join(tmp, f"poprun-lite-ports-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise PortError(f"cannot create the port-lock folder {path} ({exc.strerror}); set TMPDIR "
                        f"to a folder you can write to.") from None
    check_private_dir(path)
    return path


def check_private_dir(path: str) -> None:
    """PortError unless ``path`` is a real folder (not a symlink) owned by this user that no one
    else can write to."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise PortError(f"cannot inspect the port-lock folder {path} ({exc.strerror}); set TMPDIR "
                        f"to a folder of your own.") from None
    fix = "remove it (another user may have planted it) or set TMPDIR to a folder of your own"
    if not stat.S_ISDIR(info.st_mode):
        raise PortError(f"the port-lock folder {path} is not a folder (a symlink or a file); "
                        f"{fix}.")
    if info.st_uid != os.getuid():
        raise PortError(f"the port-lock folder {path} belongs to uid {info.st_uid}, not to you "
                        f"(uid {os.getuid()}); {fix}.")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PortError(f"the port-lock folder {path} is writable by other users (mode "
                        f"{stat.S_IMODE(info.st_mode):o}); make it private (chmod 700 {path}) "
                        f"or {fix}.")


def ensure_fd_room(instances: int) -> None:
    """Raise this process's open-file limit toward its hard limit when ``instances`` local
    instances may need more descriptors than the soft limit allows (children inherit it)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 256 + FDS_PER_INSTANCE * instances
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    new = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        debug("raised the open-file limit from %d to %d for %d instances", soft, new, instances)


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


def _candidates(low: int, high: int):
    """Every port of low..high once, in an order that differs from job to job (a random start
    and a stride coprime with the range's size), so that concurrent jobs rarely collide."""
    import math
    size = high - low + 1
    start, stride = (int.from_bytes(os.urandom(4), "little") % size for _ in range(2))
    stride = stride or 1
    while math.gcd(stride, size) != 1:
        stride += 1
    for i in range(size):
        yield low + (start + i * stride) % size


def reserve(count: int, address: str = "",
            port_range: Optional[Tuple[int, int]] = None) -> PortReservation:
    """Reserve ``count`` distinct free ports on ``address`` (wildcard by default), trying every
    port of the range at most once."""
    low, high = port_range or candidate_range()
    shown = address or "0.0.0.0"
    if count > high - low + 1:
        raise PortError(
            f"{count} instances need {count} TCP ports on {shown}, but {low}..{high} holds only "
            f"{high - low + 1}; pass a wider range with --port-range LOW-HIGH.")
    ensure_fd_room(count)
    folder = lock_dir()
    ports: List[int] = []
    locks: List[int] = []
    sockets: List[socket.socket] = []
    locked = in_use = 0
    try:
        for port in _candidates(low, high):
            if len(ports) == count:
                break
            try:
                fd = os.open(os.path.join(folder, str(port)),
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError as exc:  # e.g. a symlink planted there: that port is not ours to use
                debug("lock file for port %d cannot be opened (%s)", port, exc.strerror)
                locked += 1
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                locked += 1
                debug("port %d is locked by another poprun-lite job", port)
                continue
            sock = _probe_bind(address, port)
            if sock is None:
                os.close(fd)
                in_use += 1
                debug("port %d is in use, trying another", port)
                continue
            ports.append(port)
            locks.append(fd)
            sockets.append(sock)
    except BaseException:
        PortReservation(ports, locks, sockets).close()
        raise
    if len(ports) < count:
        PortReservation(ports, locks, sockets).close()
        raise PortError(
            f"could not reserve {count} free TCP ports on {shown} in {low}..{high}: only "
            f"{len(ports)} were free ({in_use} in use, {locked} held by other poprun-lite jobs); "
            f"free some ports or pass another range with --port-range LOW-HIGH.")
    return PortReservation(ports, locks, sockets)


def listen_socket(address: str) -> socket.socket:
    """A listening socket on a kernel-chosen port (for the rendezvous), bound before any spawn."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, 0))
    except OSError as exc:
        sock.close()
        raise PortError(f"cannot listen on {address}: {exc.strerror}; check --network "
                        f"address.") from None
    sock.listen(socket.SOMAXCONN)  # every instance may connect at once
    return sock
