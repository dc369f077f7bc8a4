"""The wrappers' side of the protocol as the attempt hears it: a new connection proves it
belongs to the job (its hello) and gets its instance's spec; every frame after that goes where
it belongs: output to the router, where the program is to the hang check, stacks to the stack
collection, an exit or a start to the instance and its world. A connection that ends without an
exit status loses its instance."""
from __future__ import annotations

import selectors
import time

from popdist_launcher.launcher.output import console, report
from popdist_launcher.launcher.output.routing import STDERR, STDOUT
from popdist_launcher.launcher.supervision.attempt import Instance, InstanceState, JobState
from popdist_launcher.launcher.supervision.hub import Conn, Hub
from popdist_launcher.launcher.supervision.stacks import StackCollector
from popdist_launcher.launcher.supervision.stdin_forward import StdinForwarder
from popdist_launcher.wire import protocol as p


class WrapperFrames:
    """Reads the wrappers' connections of ``sup``'s attempt (``on_conn``, the loop's handler)
    and acts on each frame. ``sup`` is the supervisor (what is read of it: its state,
    instances, router, hang check, world, ``stopping_signal``, ``signal_instance`` and
    ``lose``); ``secret`` is the job's, which a hello must prove."""

    def __init__(self, sup, hub: Hub, stacks: StackCollector,
                 stdin: StdinForwarder, secret: str) -> None:
        self.sup = sup
        self.hub = hub
        self.stacks = stacks
        self.stdin = stdin
        self.secret = secret.encode()

    def on_conn(self, key: selectors.SelectorKey, mask: int) -> None:
        conn = key.data[1]
        if mask & selectors.EVENT_WRITE:
            self.hub.write(conn)
        if mask & selectors.EVENT_READ and not conn.closed:
            self.read(conn)

    def read(self, conn: Conn) -> None:
        sup = self.sup
        frames = self.hub.receive(conn)
        if frames is None:  # the connection ended
            if conn.index is not None:
                inst = sup.instances[conn.index]
                for stream in (STDOUT, STDERR):
                    sup.router.close(inst.index, stream)
                if not inst.settled and conn.timed_out:
                    sup.lose(inst, f"was lost: its host stopped answering (no reply to the "
                                   f"connection's keepalive for {p.LOST_AFTER_S} s)",
                             host_gone=True)
                elif not inst.settled:
                    sup.lose(inst, "lost its wrapper (the connection closed without an exit "
                                   "status)")
            return
        for kind, payload in frames:
            if conn.index is None:
                if kind != p.HELLO or not self.hello(conn, payload):
                    self.hub.close(conn)
                    return
                continue
            self.on_frame(sup.instances[conn.index], kind, payload)

    def hello(self, conn: Conn, payload: bytes) -> bool:
        """A new connection's first frame: True when it proves the job's secret for an instance
        not yet connected, which then gets its spec (told not to run when the job stops)."""
        sup = self.sup
        proven = p.hello_proven(payload, self.secret, conn.challenge, len(sup.instances))
        if proven is None:
            console.warn("refused a connection that did not prove it belongs to this job.")
            return False
        index, their_challenge = proven
        inst = sup.instances[index]
        if inst.state is not InstanceState.PENDING:
            console.warn(f"instance {index} connected twice; refused the second.")
            return False
        conn.index = index
        inst.conn = conn
        inst.to(InstanceState.CONNECTED)
        run = sup.state in (JobState.STARTING, JobState.RUNNING) and not inst.stopped
        spec = sup.world.spec(index)
        proof = p.mac(self.secret, p.LAUNCHER_PROOF + their_challenge, index).encode()
        self.hub.send(conn, p.SPEC, proof + p.encode_spec(**spec, run=run))
        if not run:
            inst.to(InstanceState.EXITED)  # never started: nothing to wait for
            sup.world.ended(inst, "not-started", "stopped before it started")
        if index == 0:
            self.stdin.flush()
        return True

    def on_frame(self, inst: Instance, kind: int, payload: bytes) -> None:
        sup = self.sup
        if kind == p.STDOUT:
            sup.router.feed(inst.index, STDOUT, payload)
        elif kind == p.STDERR:
            sup.router.feed(inst.index, STDERR, payload)
            sup.hang.output(inst, payload, time.monotonic())
        elif kind == p.STARTED:
            inst.pid = int(payload)
            sup.hang.started(inst, time.monotonic())
            sup.world.started(inst)
            if inst.state is InstanceState.CONNECTED:
                inst.to(InstanceState.RUNNING)
            console.debug("instance %d runs as pid %d on %s", inst.index, inst.pid, inst.host)
            if sup.stopping_signal is not None:
                sup.signal_instance(inst, sup.stopping_signal)
        elif kind == p.EXIT:
            self.on_exit(inst, int(payload))
        elif kind == p.STACKS:
            if self.stacks.on_stacks(inst.index, payload.decode("utf-8", "replace")):
                self.stacks.done()
        elif kind == p.PROGRESS:
            try:
                step = int(payload)
            except ValueError:
                return
            inst.progress = step if inst.progress is None else max(inst.progress, step)
            sup.hang.progress(inst, time.monotonic())
            sup.world.progressed(inst, step)
        elif kind == p.PROBED:
            sup.hang.probed(inst, payload, time.monotonic())
        elif kind == p.WHERE:
            sup.hang.where(inst, payload, time.monotonic())
        elif kind == p.STALL:
            sup.hang.on_stall(inst, payload.decode("utf-8", "replace").strip(),
                              sup.state in (JobState.STARTING, JobState.RUNNING),
                              time.monotonic())

    def on_exit(self, inst: Instance, returncode: int) -> None:
        inst.returncode = returncode
        inst.to(InstanceState.EXITED)
        console.debug("instance %d %s", inst.index, report.describe_exit(returncode))
        if inst.index == 0:
            self.stdin.drop()
        self.stacks.ended(inst.index)
        self.sup.hang.ended(inst, time.monotonic(), returncode == 0)
        self.sup.world.exited(inst)
