"""Which address and interface a host is reached at, and free ports there.

Run on each remote host over ssh before a multi-host job starts (one round trip per host):

    python -m popdist_launcher.launcher.spawned.netinfo --ports K [--subnet CIDR | --iface NAME] [--peer ADDR]

prints one JSON line {"address", "iface", "ports", "hostname"}. The launcher calls the same
functions in-process for its own host. Standard library only.
"""
from __future__ import annotations

import fcntl
import json
import socket
import struct
import sys
from typing import Dict, List, Optional, Tuple

_SIOCGIFADDR = 0x8915


class NetInfoError(ValueError):
    """The requested interface or subnet does not exist on this host."""


def interface_addresses() -> Dict[str, str]:
    """IPv4 address of each interface that has one (name -> address)."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            found[name] = socket.inet_ntoa(packed[20:24])
    return found


def choose(subnet: Optional[str] = None, iface: Optional[str] = None,
           peer: Optional[str] = None) -> Tuple[str, str]:
    """(address, interface) of this host for the job.

    ``iface`` wins, then ``subnet``; otherwise the interface holding ``peer`` (the address the
    launcher reached this host at), or the one that routes towards ``peer``.
    """
    addresses = interface_addresses()
    host = socket.gethostname()
    if iface:
        if iface not in addresses:
            have = ", ".join(f"{n} ({a})" for n, a in sorted(addresses.items())) or "none"
            raise NetInfoError(f"host {host} has no IPv4 interface {iface!r}; it has: {have}.")
        return addresses[iface], iface
    if subnet:
        import ipaddress

        net = ipaddress.ip_network(subnet, strict=False)
        for name, address in sorted(addresses.items()):
            if ipaddress.ip_address(address) in net:
                return address, name
        have = ", ".join(f"{n} ({a})" for n, a in sorted(addresses.items())) or "none"
        raise NetInfoError(f"host {host} has no address in {subnet}; its addresses: {have}.")
    if peer:
        for name, address in addresses.items():
            if address == peer:
                return address, name
        source = route_source(peer)
        for name, address in addresses.items():
            if address == source:
                return address, name
        return peer, ""
    return "127.0.0.1", "lo"


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


def free_ports(count: int, port_range: Optional[Tuple[int, int]] = None) -> List[int]:
    from popdist_launcher.launcher import ports

    with ports.reserve(count, port_range=port_range) as reservation:
        return list(reservation.ports)


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m popdist_launcher.launcher.spawned.netinfo")
    parser.add_argument("--ports", type=int, default=0)
    parser.add_argument("--subnet")
    parser.add_argument("--iface")
    parser.add_argument("--peer")
    parser.add_argument("--port-range")
    args = parser.parse_args(argv)
    try:
        address, iface = choose(args.subnet, args.iface, args.peer)
        span = tuple(int(p) for p in args.port_range.split("-")) if args.port_range else None
        found = free_ports(args.ports, span) if args.ports else []
    except (NetInfoError, OSError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps({"address": address, "iface": iface, "ports": found,
                      "hostname": socket.gethostname(), "hostname_address": hostname_address()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
