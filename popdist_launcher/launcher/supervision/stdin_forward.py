"""The launcher's stdin, forwarded to instance 0 only: read as it arrives (a file or /dev/null at
once), queued until instance 0's wrapper is connected, then sent with one end-of-file."""
from __future__ import annotations

import os
import selectors
from typing import Callable, List, Optional, Tuple

from popdist_launcher.launcher.supervision.hub import Conn, Hub
from popdist_launcher.wire import protocol as p


class StdinForwarder:
    """``target()`` gives instance 0's connection (None until it has one) and whether instance 0
    has ended; the selector key of fd 0 is ``("stdin",)``."""

    def __init__(self, sel: selectors.BaseSelector, hub: Hub,
                 target: Callable[[], Tuple[Optional[Conn], bool]]) -> None:
        self.sel = sel
        self.hub = hub
        self.target = target
        self.queue: List[bytes] = []
        self.eof = False

    def setup(self) -> None:
        try:
            os.fstat(0)
        except OSError:
            self.eof = True
            return
        try:
            self.sel.register(0, selectors.EVENT_READ, ("stdin",))
        except (PermissionError, ValueError, OSError):  # a regular file or /dev/null: read it now
            while True:
                try:
                    data = os.read(0, 1 << 20)
                except OSError:
                    data = b""
                if not data:
                    break
                self.queue.append(data)
            self.eof = True

    def on_readable(self) -> None:
        try:
            data = os.read(0, 1 << 16)
        except BlockingIOError:
            return
        except OSError:  # EIO: a terminal that is not ours (a background job)
            data = b""
        if data:
            self.queue.append(data)
        else:
            self.sel.unregister(0)
            self.eof = True
        self.flush()

    def drop(self) -> None:
        """Instance 0 ended: what is queued goes nowhere."""
        self.queue.clear()

    def flush(self) -> None:
        conn, ended = self.target()
        if conn is None or conn.closed or ended:
            if ended:
                self.queue.clear()
            return
        for data in self.queue:
            self.hub.send(conn, p.STDIN, data)
        self.queue.clear()
        if self.eof:
            self.hub.send(conn, p.STDIN_EOF)
            self.eof = False  # sent once
            self.queue = []
