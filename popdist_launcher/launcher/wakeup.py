"""The launcher's signals while an attempt runs: caught, and carried to the supervisor's loop as
bytes on a socket its selector reads; the previous handlers come back afterwards."""
from __future__ import annotations

import contextlib
import selectors
import signal
import socket
from typing import Iterable, Iterator


@contextlib.contextmanager
def signals_to(sel: selectors.BaseSelector, signals: Iterable[int], key: tuple) -> Iterator[None]:
    """Within the block, each of ``signals`` is a byte (its number) on a socket registered on
    ``sel`` with the data ``key``."""
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    previous = {s: signal.signal(s, _ignore) for s in signals}
    old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    sel.register(wake_r, selectors.EVENT_READ, key)
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_wakeup)
        for s, handler in previous.items():
            signal.signal(s, handler)
        wake_r.close()
        wake_w.close()


def received(wake: socket.socket) -> bytes:
    """The signals carried since the last call, one byte each (none: empty)."""
    try:
        return wake.recv(64)
    except BlockingIOError:
        return b""


def _ignore(signum, frame) -> None:  # the wakeup fd carries the signal to the loop
    pass
