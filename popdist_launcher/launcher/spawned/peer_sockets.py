"""Shut down a program's TCP connections to the job's other workers (Gloo's pairs) from the
wrapper, its parent, so that a collective blocked on a failed peer fails now (Linux >= 5.6).

A Horovod worker whose collective waits on a live peer that has itself given up (its own pair
with the failed worker broke) notices nothing until HOROVOD_GLOO_TIMEOUT_SECONDS: Gloo reads a
pair only when it waits on it. When the launcher learns that a worker failed, it sends every
survivor's wrapper the job's worker addresses; the wrapper takes a copy of each connection of
its program to one of them (``pidfd_getfd``) and shuts it down, so the program's next read of
that pair ends at once and Horovod raises HorovodInternalError (its elastic reset). Left alone:
connections to the rendezvous server, connections a process accepted on a listener it still has
open (a service of its own, e.g. Horovod's notification service), and every other address.

Imported by the wrapper only when such a notice comes: it costs nothing otherwise.
POPRUN_CUT_PEERS=0 in the launcher's environment turns the notices off.
"""
import errno
import os
import socket
import sys

SWITCH_ENV = "POPRUN_CUT_PEERS"  # "0": the launcher sends no notices
ESTABLISHED = "01"
LISTEN = "0A"
SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture but alpha


def notice(rendezvous: "tuple[str, int]", peers: "list[str]") -> bytes:
    """The CUT_PEERS payload: the rendezvous server's address and port, then the addresses of
    the job's workers."""
    return " ".join([rendezvous[0], str(rendezvous[1]), *sorted(set(peers))]).encode()


def read_notice(payload: bytes) -> "tuple[tuple[str, int], set[str]]":
    address, port, *peers = payload.decode().split()
    return (_plain(address), int(port)), {_plain(a) for a in peers}


def _plain(address: str) -> str:
    """An address as /proc writes it in this module: IPv4 dotted (also when IPv4-mapped)."""
    if address.startswith("::ffff:") and "." in address:
        return address[len("::ffff:"):]
    return address


def parse_table(text: str, v6: bool) -> "dict[int, tuple[str, int, str, int, str]]":
    """/proc/net/tcp or tcp6 -> inode: (local address, local port, remote address, remote port,
    state as the kernel writes it, e.g. "01" established, "0A" listening)."""
    table = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if inode == 0:
            continue
        table[inode] = (*_endpoint(local, v6), *_endpoint(remote, v6), state)
    return table


def _endpoint(text: str, v6: bool) -> "tuple[str, int]":
    hexaddr, hexport = text.split(":")
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":  # the kernel prints each 32-bit word as a host integer
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw)
    return _plain(address), int(hexport, 16)


def choose(sockets: "dict[int, tuple[str, int, str, int, str]]",
           rendezvous: "tuple[str, int]", peers: "set[str]") -> "list[int]":
    """The inodes among one process's ``sockets`` (inode: parse_table's tuple) that are its
    connections to the job's workers: established, to an address in ``peers``, not to the
    ``rendezvous`` server, and not accepted on a port the process listens on."""
    listening = {lport for _, lport, _, _, state in sockets.values() if state == LISTEN}
    return sorted(inode for inode, (_, lport, raddr, rport, state) in sockets.items()
                  if state == ESTABLISHED and raddr in peers and (raddr, rport) != rendezvous
                  and lport not in listening)


def socket_fds(pid: int) -> "dict[int, int]":
    """inode -> one descriptor number of each socket the process holds."""
    found = {}
    folder = f"/proc/{pid}/fd"
    for name in os.listdir(folder):
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.setdefault(int(target[8:-1]), int(name))
    return found


def tables(pid: int) -> "dict[int, tuple[str, int, str, int, str]]":
    """Every TCP socket of the process's network namespace."""
    table = {}
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                table.update(parse_table(f.read(), v6))
        except OSError:
            pass
    return table


def descendants(pid: int) -> "list[int]":
    """``pid`` and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return found


def _getfd():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def getfd(pidfd: int, fd: int) -> int:
        got = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return got
    return getfd


def cut(pid: int, payload: bytes) -> int:
    """Shut down the connections of ``pid`` and its descendants to the job's workers named in
    ``payload`` (a CUT_PEERS notice); returns how many. Raises OSError when the kernel cannot
    (older than 5.6, or not allowed): the program then waits out the Gloo timeout."""
    rendezvous, peers = read_notice(payload)
    getfd = _getfd()
    count = 0
    for proc in descendants(pid):
        try:
            fds = socket_fds(proc)
            if not fds:
                continue
            table = tables(proc)
            mine = {inode: table[inode] for inode in fds if inode in table}
            targets = choose(mine, rendezvous, peers)
            if not targets:
                continue
            pidfd = os.pidfd_open(proc)
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
        try:
            for inode in targets:
                try:
                    copy = getfd(pidfd, fds[inode])
                except OSError as exc:
                    if exc.errno in (errno.EBADF, errno.ESRCH):  # closed or ended meanwhile
                        continue
                    raise
                count += _shut_down(copy, inode)
        finally:
            os.close(pidfd)
    return count


def _shut_down(copy: int, inode: int) -> bool:
    """Shut down the socket ``copy`` (this process's duplicate) is, if it is still the one with
    ``inode`` (the program may have closed it and reused its number meanwhile); close ``copy``."""
    try:
        if os.fstat(copy).st_ino != inode:
            os.close(copy)
            return False
        sock = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False  # no longer connected
    finally:
        sock.close()
