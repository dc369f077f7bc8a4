"""The host probe, run on each remote host over ssh before a multi-host job starts (one round
trip per host): which address and interface the host is reached at, and free ports there.

    python -m popdist_launcher.launcher.layout.host_probe \
        --ports K [--subnet CIDR | --iface NAME] [--peer ADDR]

prints one JSON line {"address", "iface", "ports", "hostname", "hostname_address"}.
"""
from __future__ import annotations

import json
import socket
import sys
from typing import List, Optional, Tuple

from popdist_launcher.launcher.layout import ports
from popdist_launcher.wire import netinfo


def free_ports(count: int, port_range: Optional[Tuple[int, int]] = None) -> List[int]:
    with ports.reserve(count, port_range=port_range) as reservation:
        return list(reservation.ports)


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m popdist_launcher.launcher.layout.host_probe")
    parser.add_argument("--ports", type=int, default=0)
    parser.add_argument("--subnet")
    parser.add_argument("--iface")
    parser.add_argument("--peer")
    parser.add_argument("--port-range")
    args = parser.parse_args(argv)
    try:
        address, iface = netinfo.choose(args.subnet, args.iface, args.peer)
        span = tuple(int(p) for p in args.port_range.split("-")) if args.port_range else None
        found = free_ports(args.ports, span) if args.ports else []
    except (netinfo.NetInfoError, OSError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps({"address": address, "iface": iface, "ports": found,
                      "hostname": socket.gethostname(),
                      "hostname_address": netinfo.hostname_address()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
