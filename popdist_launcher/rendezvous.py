"""Horovod's own Gloo rendezvous server, run in a helper process on a socket the launcher bound.

The launcher binds and listens before any instance starts (so the port is in every instance's
environment, with no race) and starts this helper only when the first instance connects: jobs
that never call ``hvd.init()`` never pay for importing Horovod. The helper lives until the
launcher closes its stdin, or dies.

It answers only the job's own hosts (ALLOWED_JSON: their addresses) and loopback: Gloo's HTTP
client cannot carry a secret, so the peer address is what tells this job from others.

Usage (by the launcher only): python -m popdist_launcher.rendezvous FD SLOTS_JSON [ALLOWED_JSON]
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import types


def serve(fd: int, slots: list, allowed: list = ()) -> None:
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

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

    server = AdoptedRendezvousServer(("", 0), RendezvousHandler, False)
    server.daemon_threads = True
    server.init([types.SimpleNamespace(**slot) for slot in slots])
    thread = threading.Thread(target=server.serve_forever, name="rendezvous", daemon=True)
    thread.start()
    sys.stdin.buffer.read()  # returns when the launcher closes the pipe or dies
    server.shutdown()


if __name__ == "__main__":
    serve(int(sys.argv[1]), json.loads(sys.argv[2]),
          json.loads(sys.argv[3]) if len(sys.argv) > 3 else [])
