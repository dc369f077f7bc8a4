"""Which address and interface a host is reached at (launcher/layout/host_probe.py asks it on each
host; the launcher and the collectives call it in-process). Interface addresses come from psutil
(every IPv4 address of an interface, not only its first).
"""
from __future__ import annotations

import socket
from typing import List, Optional, Tuple


class NetInfoError(ValueError):
    """The requested interface or subnet does not exist on this host."""


def interface_addresses() -> List[Tuple[str, str]]:
    """(interface, IPv4 address) for every address of every interface, in psutil's order."""
    import psutil

    return [(name, entry.address)
            for name, entries in psutil.net_if_addrs().items()
            for entry in entries if entry.family == socket.AF_INET]


def _listing(addresses: List[Tuple[str, str]]) -> str:
    return ", ".join(f"{n} ({a})" for n, a in sorted(addresses)) or "none"


def choose(subnet: Optional[str] = None, iface: Optional[str] = None,
           peer: Optional[str] = None) -> Tuple[str, str]:
    """(address, interface) of this host for the job.

    ``iface`` wins, then ``subnet``; otherwise the interface holding ``peer`` (the address the
    launcher reached this host at), or the one that routes towards ``peer``. A one-host job
    (none given) is on loopback without listing interfaces (psutil takes ~40 ms to import).
    """
    if not (iface or subnet or peer):
        return "127.0.0.1", "lo"
    addresses = interface_addresses()
    host = socket.gethostname()
    if iface:
        for name, address in addresses:
            if name == iface:
                return address, iface
        raise NetInfoError(f"host {host} has no IPv4 interface {iface!r}; it has: "
                           f"{_listing(addresses)}.")
    if subnet:
        import ipaddress

        net = ipaddress.ip_network(subnet, strict=False)
        for name, address in sorted(addresses):
            if ipaddress.ip_address(address) in net:
                return address, name
        raise NetInfoError(f"host {host} has no address in {subnet}; its addresses: "
                           f"{_listing(addresses)}.")
    for name, address in addresses:
        if address == peer:
            return address, name
    source = route_source(peer)
    for name, address in addresses:
        if address == source:
            return address, name
    return peer, ""


def route_source(destination: str) -> str:
    """The local address the kernel would use to reach ``destination`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((destination, 9))
        return s.getsockname()[0]


def hostname_address() -> str:
    """What this host's own name resolves to here ("" when it does not resolve)."""
    try:
        return socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0]
    except (socket.gaierror, IndexError):
        return ""
