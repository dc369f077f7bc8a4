"""The launcher's end of the helper process that runs Horovod's ElasticDriver
(``elastic/helper/elastic_driver.py``): start it, exchange its JSON lines, and end it."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from typing import List, Optional

from popdist_launcher.launcher import processes
from popdist_launcher.wire import rendezvous
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire.helper_settings import HelperSettings

HELPER_MODULE = "popdist_launcher.launcher.elastic.helper.elastic_driver"
HELPER_EXIT_S = 2.0  # after its socket closed, before the helper's group is killed
SEND_BUFFER = 1 << 20  # a megabyte the helper has not read: it is stuck


class DriverLink:
    """The helper process and its socket; ``fileno`` is the socket's, to watch for its frames."""

    def __init__(self, listener: socket.socket, settings: HelperSettings, secret: str) -> None:
        ours, theirs = socket.socketpair()
        self.helper = subprocess.Popen(
            [sys.executable, "-m", HELPER_MODULE, str(theirs.fileno()), str(listener.fileno()),
             settings.encode()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(), listener.fileno()), process_group=0, close_fds=True,
            env={**os.environ, rendezvous.SECRET_ENV: secret})
        theirs.close()
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.sock: Optional[socket.socket] = ours
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

    def read(self) -> Optional[List[dict]]:
        """The messages that arrived ([] when none); None once the helper closed its end."""
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        *lines, self._incoming = (self._incoming + data).split(b"\n")
        received = []
        for line in lines:
            try:
                frame = json.loads(line) if line.strip() else None
            except ValueError:
                frame = {"kind": frames.Fatal.KIND,
                         "reason": f"the elastic driver sent {line[:80]!r}, which is no message"}
            if frame is not None:
                received.append(frame)
        return received

    def exit_status(self) -> Optional[int]:
        """The helper's exit status, None while it runs."""
        return self.helper.poll()

    def close_socket(self) -> None:
        """No more messages either way (the helper sees its end of file and ends)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def close(self) -> None:
        """Close the socket and wait for the helper; its group is killed if it lingers."""
        self.close_socket()
        try:
            self.helper.wait(timeout=HELPER_EXIT_S)
        except subprocess.TimeoutExpired:
            processes.signal_group(self.helper.pid, signal.SIGKILL)
            self.helper.wait()
