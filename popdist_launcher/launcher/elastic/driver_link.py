"""The launcher's end of the helper process that runs Horovod's ElasticDriver
(``elastic/helper/elastic_driver.py``): start it, exchange its frames (``wire/helper_frames.py``,
encoded and decoded there), and end it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from typing import List, Optional

from popdist_launcher.launcher.supervision import processes
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire.helper_settings import HelperSettings

HELPER_MODULE = "popdist_launcher.launcher.elastic.helper.elastic_driver"
HELPER_EXIT_S = 2.0  # after its socket closed, before the helper's group is killed
SEND_BUFFER = 1 << 20  # a megabyte the helper has not read: it is stuck


class HelperSocket:
    """The launcher's end of the socketpair to the helper: frames out, typed frames in (both
    through ``wire/helper_frames.py``); ``fileno`` is the socket's, to watch for its frames."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.sock: Optional[socket.socket] = sock
        self._incoming = b""

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def send(self, frame: frames.Frame) -> bool:
        """Send one frame; False when the helper has stopped reading (its buffer is full)."""
        if self.sock is None:
            return True
        data = frames.encode(frame)
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return True  # it ended: its end of file is read next
        return sent == len(data)

    def read(self) -> Optional[List[frames.Frame]]:
        """The frames that arrived ([] when none); None once the helper closed its end."""
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        *lines, self._incoming = (self._incoming + data).split(b"\n")
        return [frame_of(line) for line in lines if line.strip()]

    def close_socket(self) -> None:
        """No more messages either way (the helper sees its end of file and ends)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def frame_of(line: bytes) -> frames.Frame:
    """The record of one line from the helper, decoded as it was encoded; a FATAL one saying
    why when the line is no frame."""
    try:
        return frames.decode(line)
    except ValueError as exc:
        return frames.Fatal(reason=f"the elastic driver sent {line[:80]!r}, which is no "
                                   f"message ({exc})")


class DriverLink(HelperSocket):
    """The helper process and the launcher's end of its socket."""

    def __init__(self, listener: socket.socket, settings: HelperSettings, secret: str) -> None:
        ours, theirs = socket.socketpair()
        self.helper = subprocess.Popen(
            [sys.executable, "-m", HELPER_MODULE, str(theirs.fileno()), str(listener.fileno()),
             settings.encode()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(), listener.fileno()), process_group=0, close_fds=True,
            env={**os.environ, rendezvous.SECRET_ENV: secret})
        theirs.close()
        super().__init__(ours)

    def exit_status(self) -> Optional[int]:
        """The helper's exit status, None while it runs."""
        return self.helper.poll()

    def close(self) -> None:
        """Close the socket and wait for the helper; its group is killed if it lingers."""
        self.close_socket()
        try:
            self.helper.wait(timeout=HELPER_EXIT_S)
        except subprocess.TimeoutExpired:
            processes.signal_group(self.helper.pid, signal.SIGKILL)
            self.helper.wait()
