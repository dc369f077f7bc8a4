"""Horovod's Gloo wiring for instances that torchrun, a TF_CONFIG, PMI or srun started.

A plain ``hvd.init()`` needs Horovod's rank variables and, for Gloo, a rendezvous server. Under
poprun-lite the launcher provides both, and under Open MPI's mpirun MPI does; other launchers give
only their own variables. ``prepare()`` then sets Horovod's variables from the instance's place
(``runtime.foreign_launch``) and instance 0 serves Horovod's own rendezvous server
(``wire/rendezvous.py``, behind a secret in the URL path) until it exits.

Where the rendezvous lives: $POPDIST_RENDEZVOUS_ADDR=HOST:PORT when set (every instance must get
the same value; HOST must reach instance 0), else torchrun's MASTER_ADDR on port MASTER_PORT+1
(torchrun's own agent holds MASTER_PORT), else a TF_CONFIG's chief (or worker 0) host on the first
port after its TF_CONFIG port that no task uses there. PMI launchers and srun give no address:
POPDIST_RENDEZVOUS_ADDR is required there.

The secret: $POPDIST_RENDEZVOUS_SECRET when set (give every instance the same value, e.g. from a
Kubernetes Secret), else a hash of what every instance knows about the job and outsiders are
unlikely to know together (the launcher's job variables: MASTER_ADDR/PORT, WORLD_SIZE and the
torchelastic run id and restart count; or the whole TF_CONFIG cluster; plus the rendezvous
address). The derived secret keeps other jobs, stale instances of an earlier attempt and casual
probes out of the store, which Horovod's own server (as horovodrun runs it) does not do at all; it
does not stop someone who can read the job's configuration: set POPDIST_RENDEZVOUS_SECRET for that.
"""
from __future__ import annotations

import errno
import hashlib
import ipaddress
import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import List, MutableMapping, Optional, Sequence, Tuple

from popdist_launcher import runtime
from popdist_launcher.wire import netinfo
from popdist_launcher.wire import rendezvous as rendezvous_server

log = logging.getLogger(__name__)

RENDEZVOUS_ADDR_ENV = "POPDIST_RENDEZVOUS_ADDR"
RENDEZVOUS_SECRET_ENV = "POPDIST_RENDEZVOUS_SECRET"
TIMEOUT_ENV = "HOROVOD_GLOO_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_SECONDS = 120
# Any of these means Horovod was already told how to start (horovodrun, poprun-lite, the user).
HOROVOD_OWN = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_CONTROLLER",
               "HOROVOD_GLOO_RENDEZVOUS_ADDR")


def layout(node_of_rank: Sequence[int]) -> List[dict]:
    """Horovod's slot of every instance (as horovodrun assigns them) given each one's node."""
    return [{"hostname": f"node{node}", "rank": rank, "size": len(node_of_rank),
             "local_rank": local, "local_size": local_size,
             "cross_rank": cross, "cross_size": cross_size}
            for rank, (node, (local, local_size, cross, cross_size)) in enumerate(
                zip(node_of_rank, rendezvous_server.horovod_ranks(node_of_rank)))]


def _parse_address(value: str) -> Tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise runtime.LaunchEnvironmentError(
            f"{RENDEZVOUS_ADDR_ENV}={value!r} is not HOST:PORT; set it to instance 0's host and "
            f"a free port there (the same value for every instance), e.g. node0:29400.")
    return host, int(port)


def _secret(env: MutableMapping[str, str], place: runtime.ForeignLaunch,
            address: Tuple[str, int]) -> str:
    own = env.get(RENDEZVOUS_SECRET_ENV, "")
    material = (("user", own) if own
                else ("derived", place.launcher, place.job_key, *map(str, address)))
    return hashlib.sha256("\0".join(material).encode()).hexdigest()[:32]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _source_address(host: str) -> Optional[str]:
    """The local address this host sends from to reach ``host`` (nothing is sent)."""
    try:
        return netinfo.route_source(host)
    except OSError:
        return None


def _interface_towards(host: str) -> Optional[str]:
    """The network interface this host uses to reach ``host`` (Gloo's HOROVOD_GLOO_IFACE).

    A host name that resolves to loopback only here (``127.0.1.1`` for the machine's own name,
    a common /etc/hosts entry) would put Gloo on ``lo`` where the other hosts cannot reach it:
    then the interface of the default route is taken (none when there is no such route)."""
    local = _source_address(host)
    if local is not None and ipaddress.ip_address(local).is_loopback \
            and not (_is_address(host) or host == "localhost"):
        local = _source_address("192.0.2.1")  # TEST-NET-1: only the route is looked up
    if local is None:
        return None
    return next((name for name, address in netinfo.interface_addresses() if address == local),
                None)


def _serve(address: Tuple[str, int], slots: List[dict], secret: str,
           origin: str) -> subprocess.Popen:
    """Listen on ``address`` and hand the socket to Horovod's rendezvous server in a helper
    process that lives until this process exits. An IP address is bound as given (all
    interfaces when it is not one of this host's, e.g. a Kubernetes service's); a host name on
    every interface, since it may resolve to loopback here and to the real address elsewhere."""
    host, port = address
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as exc:
        raise runtime.LaunchEnvironmentError(
            f"instance 0 cannot resolve the rendezvous host {host!r} (from {origin}): "
            f"{exc.strerror or exc}; set {RENDEZVOUS_ADDR_ENV}=HOST:PORT.") from None
    everywhere = ("::" if family == socket.AF_INET6 else "", port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            sock.bind(sockaddr if _is_address(host) else everywhere)
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            sock.bind(everywhere)
        sock.listen(256)
    except OSError as exc:
        sock.close()
        raise runtime.LaunchEnvironmentError(
            f"instance 0 cannot serve Horovod's rendezvous on {host}:{port} (from {origin}): "
            f"{exc.strerror or exc}; set {RENDEZVOUS_ADDR_ENV}=HOST:PORT to a free port on "
            f"instance 0's host, the same for every instance.") from None
    with sock:
        return subprocess.Popen(
            [sys.executable, "-m", rendezvous_server.__name__, str(sock.fileno()),
             json.dumps(slots, separators=(",", ":")), "[]"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(sock.fileno(),),
            process_group=0, env={**os.environ, rendezvous_server.SECRET_ENV: secret})


def _wait_reachable(address: Tuple[str, int], timeout: float, rank: int, origin: str) -> None:
    """Block until instance 0 listens at ``address``: Horovod's client gives up after a few
    refused connections, so instances must not call hvd.init() before instance 0 serves."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            wait = max(0.1, min(2.0, deadline - time.monotonic()))
            socket.create_connection(address, timeout=wait).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise runtime.LaunchEnvironmentError(
                    f"instance {rank} could not reach Horovod's rendezvous at "
                    f"{address[0]}:{address[1]} (from {origin}) within {timeout:g} s "
                    f"({TIMEOUT_ENV}); "
                    f"check that instance 0 started and that the port is reachable, or set "
                    f"{RENDEZVOUS_ADDR_ENV}=HOST:PORT.") from None
            time.sleep(0.2)


def prepare(env: MutableMapping[str, str]) -> Optional[subprocess.Popen]:
    """Set what a plain hvd.init() needs on Gloo when a foreign launcher started this process
    with more than one instance and Horovod has no variables of its own; on instance 0, start
    the rendezvous server and return its process (None everywhere else, and when nothing was
    needed: poprun-lite, Open MPI's mpirun, horovodrun, one instance)."""
    if any(name in env for name in HOROVOD_OWN) or runtime.context().launcher in (
            "", runtime.POPRUN_LITE):
        return None
    place = runtime.foreign_launch(env)
    if place is None or place.size == 1 or place.launcher == runtime.MPIRUN:
        return None  # (horovodrun's instances have HOROVOD_RANK, so never get here)
    if env.get(RENDEZVOUS_ADDR_ENV, "").strip():
        address, origin = _parse_address(env[RENDEZVOUS_ADDR_ENV]), RENDEZVOUS_ADDR_ENV
    elif place.rendezvous is not None:
        address, origin = place.rendezvous, place.rendezvous_origin
    else:
        raise runtime.LaunchEnvironmentError(
            f"this program was started by {place.launcher} ({place.variables}) as instance "
            f"{place.rank} of {place.size}, which gives Horovod's Gloo rendezvous no address; set "
            f"{RENDEZVOUS_ADDR_ENV}=HOST:PORT (instance 0's host and a free port there) for every "
            f"instance, or start the program with poprun-lite or Open MPI's mpirun.")
    raw = env.get(TIMEOUT_ENV, "").strip() or str(DEFAULT_TIMEOUT_SECONDS)
    if not raw.isdigit() or int(raw) < 1:
        raise runtime.LaunchEnvironmentError(
            f"{TIMEOUT_ENV}={raw!r} is not a whole number of seconds; set it to e.g. 120.")
    timeout = int(raw)
    slots = layout(place.node_of_rank if place.node_of_rank is not None
                   else range(place.size))  # unknown hosts: each instance a node of its own
    mine = slots[place.rank]
    secret = _secret(env, place, address)
    server = None
    if place.rank == 0:
        server = _serve(address, slots, secret, origin)
    else:
        _wait_reachable(address, timeout, place.rank, origin)
    env.update({
        "HOROVOD_RANK": str(place.rank),
        "HOROVOD_SIZE": str(place.size),
        "HOROVOD_LOCAL_RANK": str(mine["local_rank"]),
        "HOROVOD_LOCAL_SIZE": str(mine["local_size"]),
        "HOROVOD_CROSS_RANK": str(mine["cross_rank"]),
        "HOROVOD_CROSS_SIZE": str(mine["cross_size"]),
        "HOROVOD_HOSTNAME": mine["hostname"],
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous_server.client_address(*address, secret),
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(address[1]),
        TIMEOUT_ENV: str(timeout),
    })
    if "HOROVOD_GLOO_IFACE" not in env:
        iface = _interface_towards(address[0])
        if iface:
            env["HOROVOD_GLOO_IFACE"] = iface
    log.debug("collectives: %s instance %d of %d, Gloo rendezvous at %s:%d (%s)%s",
              place.launcher, place.rank, place.size, address[0], address[1], origin,
              ", served here" if server else "")
    return server
