"""Horovod's own Gloo rendezvous server, run in a helper process on a socket the launcher bound,
answering only requests that carry the job's secret.

The launcher binds and listens before any instance starts (so the port is in every instance's
environment, with no race) and starts this helper only when the first instance connects: jobs
that never call ``hvd.init()`` never pay for importing Horovod. The helper lives until the
launcher closes its stdin, or dies.

How the store is protected: Horovod's Gloo HTTP client (horovod/common/gloo/http_store.h) builds
every URL as ``http://{HOROVOD_GLOO_RENDEZVOUS_ADDR}:{PORT}/{scope}/{key}``. The launcher sets
HOROVOD_GLOO_RENDEZVOUS_ADDR to ``client_address(...)`` = ``ADDRESS:PORT/SECRET``, so every request
of the job's instances reaches ``ADDRESS:PORT`` with the path ``/SECRET:PORT/{scope}/{key}``. This
server answers 403 to any request (GET, PUT, DELETE, HEAD...) whose path does not start with that
prefix, and strips it before Horovod's handler sees the request. SECRET is 128 random bits, new
for every attempt; it travels in the instances' environment (readable only by the job's user and
root) and, between hosts, in the HTTP requests (plain text on the network, like the data Gloo
sends). Requests are also accepted only from the job's hosts' addresses and loopback.

Usage (by the launcher only), with the secret in $POPRUN_RENDEZVOUS_SECRET (never in argv, which
every local user can read; without it the server refuses to start):
python -m popdist_launcher.wire.rendezvous FD SLOTS_JSON [ALLOWED_JSON]
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, Hashable, List, Sequence, Tuple

SECRET_ENV = "POPRUN_RENDEZVOUS_SECRET"
FORBIDDEN = 403


def new_secret() -> str:
    """A fresh secret for one attempt's rendezvous (32 hex digits)."""
    return os.urandom(16).hex()


def horovod_ranks(node_of_rank: Sequence[Hashable]) -> List[Tuple[int, int, int, int]]:
    """(local rank, local size, cross rank, cross size) of every rank, as horovodrun assigns
    them, given each rank's node: local ranks in rank order on a node; the cross communicator of
    local rank k holds the nodes that have one, in order of first appearance."""
    counts: Dict[Hashable, int] = {}
    local_ranks = []
    for node in node_of_rank:
        local_ranks.append(counts.get(node, 0))
        counts[node] = counts.get(node, 0) + 1
    nodes = list(counts)  # insertion order: first appearance
    ranks = []
    for node, local in zip(node_of_rank, local_ranks):
        holding = [n for n in nodes if counts[n] > local]
        ranks.append((local, counts[node], holding.index(node), len(holding)))
    return ranks


def client_address(address: str, port: int, secret: str) -> str:
    """The value of HOROVOD_GLOO_RENDEZVOUS_ADDR that makes Horovod's requests carry ``secret``
    (HOROVOD_GLOO_RENDEZVOUS_PORT stays the plain port)."""
    return f"{address}:{port}/{secret}"


MIN_SECRET_CHARS = 32


def make_server(fd: int, handler_cls: type, allowed, secret: str):
    """Horovod's rendezvous HTTP server (not yet serving) on the listening socket ``fd``, with
    ``handler_cls`` (a Horovod RendezvousHandler subclass) behind the secret: requests whose path
    does not start with ``/SECRET:PORT/`` get 403 and touch nothing. ``allowed``: client addresses
    accepted besides loopback (empty: any); a set may grow while the server runs."""
    import hmac
    import socket

    from horovod.runner.http.http_server import RendezvousHTTPServer

    class AdoptedRendezvousServer(RendezvousHTTPServer):
        """Horovod's server, serving on the inherited listening socket instead of binding one."""

        def server_bind(self) -> None:
            self.socket.close()
            self.socket = socket.socket(fileno=fd)
            self.server_address = self.socket.getsockname()
            self.server_name, self.server_port = self.server_address[:2]

        def server_activate(self) -> None:
            pass  # already listening

        def verify_request(self, request, client_address) -> bool:
            host = client_address[0]
            if host.startswith("::ffff:"):
                host = host[7:]
            return not allowed or host in allowed or host.startswith("127.") or host == "::1"

    server = AdoptedRendezvousServer(("", 0), handler_cls, False)
    prefix = f"/{secret}:{server.server_port}/".encode()

    class SecretRendezvousHandler(handler_cls):
        """Horovod's handler behind the secret: requests without it get 403 and touch nothing."""

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            path = self.path.encode("latin-1", "replace")
            if not hmac.compare_digest(path[:len(prefix)], prefix):
                self.send_status_code(FORBIDDEN)
                return False
            self.path = "/" + self.path[len(prefix):]
            return True

    server.RequestHandlerClass = SecretRendezvousHandler
    server.daemon_threads = True
    return server


def serve(fd: int, slots: list, allowed: list, secret: str) -> None:
    """Serve Horovod's rendezvous on the listening socket ``fd`` until stdin closes."""
    if len(secret) < MIN_SECRET_CHARS:
        raise SystemExit(f"poprun-lite rendezvous: ${SECRET_ENV} must hold the job's secret (at "
                         f"least {MIN_SECRET_CHARS} characters); the launcher sets it.")
    import threading
    import types

    from horovod.runner.http.http_server import RendezvousHandler

    server = make_server(fd, RendezvousHandler, allowed, secret)
    server.init([types.SimpleNamespace(**slot) for slot in slots])
    thread = threading.Thread(target=server.serve_forever, name="rendezvous", daemon=True)
    thread.start()
    sys.stdin.buffer.read()  # returns when the launcher closes the pipe or dies
    server.shutdown()


if __name__ == "__main__":
    serve(int(sys.argv[1]), json.loads(sys.argv[2]),
          json.loads(sys.argv[3]) if len(sys.argv) > 3 else [], os.environ.get(SECRET_ENV, ""))
