"""Periodic host discovery for an elastic job, in a process of its own (started by
``discovery/poller.py``'s ``Poller``):

    python -m popdist_launcher.launcher.elastic.discovery.poll \
        SCRIPT SLOTS_PER_HOST INTERVAL TIMEOUT

runs SCRIPT every INTERVAL seconds (each run bounded by TIMEOUT seconds, see
``discovery_script.run_discovery``) and writes one JSON line per run to stdout:
``{"hosts": [[host, slots], ...]}`` or ``{"error": sentence, "kind": kind}``. It exits when its
stdout has no reader any more, when its parent dies (PR_SET_PDEATHSIG, and a check per run) or on
SIGTERM; each time the script it is running is killed with it (the script has a process group of
its own, so that a timeout can kill all of it).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from popdist_launcher.launcher.elastic.discovery import script as discovery_script
from popdist_launcher.launcher.supervision.processes import signal_group

PR_SET_PDEATHSIG = 1
IDLE, STARTING = 0, -1


class _Runs:
    """The script run in progress, so that SIGTERM takes its process group down too."""

    def __init__(self) -> None:
        self.pgid = IDLE  # IDLE, STARTING (not yet known), or the running script's group id
        self.stopping = False

    def on_sigterm(self, signum, frame) -> None:
        self.stopping = True
        if self.pgid > 0:
            signal_group(self.pgid, signal.SIGKILL)
        if self.pgid != STARTING:  # while starting, started() or run() finishes the job
            os._exit(0)

    def started(self, pid: int) -> None:
        self.pgid = pid
        if self.stopping:
            self.on_sigterm(signal.SIGTERM, None)

    def run(self, script: str, slots_per_host: int, timeout: float) -> dict:
        self.pgid = STARTING
        try:
            hosts = discovery_script.run_discovery(script, slots_per_host, timeout,
                                             on_start=self.started)
            return {"hosts": hosts}
        except discovery_script.DiscoveryError as err:
            return {"error": str(err), "kind": err.kind}
        finally:
            self.pgid = IDLE
            if self.stopping:
                os._exit(0)


def _write_all(data: bytes) -> None:
    while data:
        data = data[os.write(1, data):]


def main(argv: list) -> int:
    script, slots_per_host = argv[0], int(argv[1])
    interval, timeout = float(argv[2]), float(argv[3])
    runs = _Runs()
    signal.signal(signal.SIGTERM, runs.on_sigterm)
    parent = os.getppid()
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    while os.getppid() == parent:  # checked after prctl: the parent may have died before it
        began = time.monotonic()
        frame = runs.run(script, slots_per_host, timeout)
        try:
            _write_all((json.dumps(frame) + "\n").encode())
        except BrokenPipeError:
            return 0
        time.sleep(max(0.0, interval - (time.monotonic() - began)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
