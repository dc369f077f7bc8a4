"""The launcher's one event loop: a selector whose registrations are tagged by kind, a handler
per kind, callbacks for watched file objects, and the launcher's signals carried in as bytes on
a socket (the wakeup fd), so a signal is handled in the loop like any other event."""
from __future__ import annotations

import contextlib
import selectors
import signal
import socket
from typing import Callable, Dict, Iterable, Iterator, Optional

Handler = Callable[[selectors.SelectorKey, int], None]


class EventLoop:
    """``sel`` is the selector; a registration's data is a tuple whose first item is its kind
    (``("conn", conn)``, ``("exit", started)``, ...), and ``wait`` hands each ready one to the
    handler of its kind. Two kinds are the loop's own: ``watch`` and ``signal``."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self._handlers: Dict[str, Handler] = {"watch": lambda key, mask: key.data[1]()}

    def handle(self, kind: str, handler: Handler) -> None:
        """Events of registrations of ``kind`` go to ``handler(key, mask)``."""
        self._handlers[kind] = handler

    def watch(self, fileobj, callback: Callable[[], None]) -> None:
        """Call ``callback`` from the loop whenever ``fileobj`` is readable."""
        self.sel.register(fileobj, selectors.EVENT_READ, ("watch", callback))

    def unwatch(self, fileobj) -> None:
        """Stop watching ``fileobj`` (before closing it); nothing when it is not watched."""
        watched = self.sel.get_map()  # None once the loop is closed
        if watched is not None and fileobj in watched:
            self.sel.unregister(fileobj)

    @contextlib.contextmanager
    def signals(self, signals: Iterable[int], on_signal: Callable[[int], None]) -> Iterator[None]:
        """Within the block, each of ``signals`` reaches ``on_signal(signum)`` from the loop;
        the previous handlers come back afterwards."""
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        previous = {s: signal.signal(s, _ignore) for s in signals}
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self.sel.register(wake_r, selectors.EVENT_READ, ("watch", lambda: _deliver(wake_r,
                                                                                  on_signal)))
        try:
            yield
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.unwatch(wake_r)
            wake_r.close()
            wake_w.close()

    def wait(self, timeout: Optional[float]) -> None:
        """Wait up to ``timeout`` seconds (None: for ever) and handle what became ready."""
        for key, mask in self.sel.select(timeout):
            # By descriptor: an earlier event of this batch may have closed this one's socket
            # (a lost host takes its other connections), whose fileno() is then -1.
            if self.sel.get_map().get(key.fd) is not key:
                continue  # unregistered by an earlier event of this batch
            self._handlers[key.data[0]](key, mask)

    def close(self) -> None:
        self.sel.close()


def _deliver(wake: socket.socket, on_signal: Callable[[int], None]) -> None:
    """The signals carried since the last call, one byte each, to ``on_signal``."""
    try:
        data = wake.recv(64)
    except BlockingIOError:
        return
    for signum in data:
        on_signal(signum)


def _ignore(signum, frame) -> None:  # the wakeup fd carries the signal to the loop
    pass
