"""The elastic driver helper's end of its socketpair to the launcher: frames (wire/helper_frames.py)
out under a lock, in on a thread; the helper ends when the launcher is gone."""
from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Callable

from popdist_launcher.wire import helper_frames as frames
log = logging.getLogger(__name__)


class LauncherLink:
    """The helper's end of the socketpair: frames out under a lock, frames in on a thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def send(self, frame: frames.Frame) -> None:
        data = frames.encode(frame)
        try:
            with self._lock:
                self._sock.sendall(data)
        except OSError:
            os._exit(0)  # the launcher is gone: nothing left to drive

    def read_forever(self, handle: Callable[[frames.Frame], None]) -> None:
        """Call ``handle`` with every frame; end the process when the launcher closes its end."""
        pending = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                os._exit(0)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    handle(frames.decode(line))
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("ignored a frame from the launcher that is not valid (%s): %r",
                              exc, line[:200])
