"""Horovod's elastic rendezvous server in the elastic driver helper, on the listening socket
the launcher bound, answering only requests that carry the job's secret, and its handler."""
from __future__ import annotations

import logging
import sys
import threading
from typing import Set

from horovod.runner.elastic.rendezvous import create_rendezvous_handler

from popdist_launcher.wire.rendezvous import make_server

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 60.0  # reading one rendezvous request from a connected worker
GLOO_GLOBAL_SCOPE = "global"  # the HTTP store scope of Gloo's global context (gloo_context.h)


class AdoptedRendezvous:
    """Horovod's RendezvousServer (start, init, stop) on the listening socket the launcher bound,
    answering only requests that carry the job's secret."""

    def __init__(self, fd: int, allowed: Set[str], secret: str) -> None:
        self._fd = fd
        self._allowed = allowed
        self._secret = secret
        self._server = None

    def start(self, handler_cls: type) -> int:
        class BoundedHandler(handler_cls):
            timeout = REQUEST_TIMEOUT_S

        self._server = make_server(self._fd, BoundedHandler, self._allowed, self._secret)
        self._server.handle_error = self._request_failed  # socketserver prints a traceback
        threading.Thread(target=self._server.serve_forever, name="rendezvous", daemon=True).start()
        return self._server.server_port

    @staticmethod
    def _request_failed(request, client_address) -> None:
        # e.g. a worker stopped while its rank_and_size request waited for the round
        log.info("a rendezvous request from %s failed: %s", client_address[0], sys.exc_info()[1])

    def init(self, host_alloc_plan) -> None:
        self._server.init(host_alloc_plan)

    def stop(self) -> None:
        self._server.shutdown()


def rendezvous_handler(driver) -> type:
    """Horovod's elastic rendezvous handler, with a survivor's rank_and_size answer held until
    the round's new workers have reached Gloo's rendezvous (their PUTs under its global
    scope, which this handler serves too)."""
    base = create_rendezvous_handler(driver)

    class HoldingRendezvousHandler(base):
        def _get_rank_and_size(self, host, local_rank):
            driver.record_ready(host, local_rank)
            driver.hold_survivors()
            return driver.get_slot_info(host, local_rank).to_response_string().encode("ascii")

        def _put_value(self, scope, key, value):
            super()._put_value(scope, key, value)
            if scope == GLOO_GLOBAL_SCOPE:
                driver.arrived(key)

    return HoldingRendezvousHandler
