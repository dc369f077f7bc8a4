"""The hosts a Horovod elastic job can start workers on: each host the discovery script (or -H)
lists is probed in the background until it answers, lost hosts wait for a probe to answer
again, and the usable ones are what the driver is told."""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout.plan import Host
from popdist_launcher.launcher.layout.remote import BackgroundProbe, RemoteError, probe_command
from popdist_launcher.launcher.layout.topology import Layout

PROBE_RETRY_S = 2.0  # a host whose probe failed is probed again at the first poll after this
Hosts = List[Tuple[str, int]]


class HostProbes:
    """``refresh()`` after every change of the listed hosts; ``push(hosts)`` tells the driver,
    ``allow(addresses)`` lets a new host's workers in, ``event(text)`` logs; ``watch`` and
    ``unwatch`` put a probe on the job's loop."""

    def __init__(self, layout: Layout, address: str, iface: Optional[str],
                 listed: Callable[[], Hosts], push: Callable[[Hosts], None],
                 allow: Callable[[List[str]], None], event: Callable[[str], None],
                 watch: Callable[[object, Callable[[], None]], None],
                 unwatch: Callable[[object], None], initial: Sequence[str]) -> None:
        self.layout = layout
        self.address, self.iface = address, iface
        self._listed, self._push, self._allow, self._event = listed, push, allow, event
        self._watch, self._unwatch = watch, unwatch
        self.hosts: Dict[str, Host] = {}  # probed hosts: where workers can be started
        self.lost: Dict[str, str] = {}  # hosts lost (why), until a probe answers again
        self.pushed: Optional[Hosts] = None  # what the driver was told last
        self._probes: Dict[str, BackgroundProbe] = {}
        self._retry_at: Dict[str, float] = {}  # hosts whose probe failed: not before then
        self._initial = set(initial)  # the first HOSTS waits for them: round 1 sees them all

    def usable(self, name: str) -> Optional[Host]:
        """The host to start a worker on, None when it is unknown or lost."""
        return None if name in self.lost else self.hosts.get(name)

    def lose(self, name: str, why: str) -> bool:
        """A host stopped answering; True when it was not lost already."""
        first = name not in self.lost
        self.lost[name] = why
        return first

    def refresh(self) -> None:
        """Probe the listed hosts not yet known (or lost), and push the usable ones."""
        listed = self._listed()
        now = time.monotonic()
        for name, _ in listed:
            if (name not in self.hosts or name in self.lost) and name not in self._probes and \
                    now >= self._retry_at.get(name, 0.0):
                self._probe(name)
        usable = [(n, s) for n, s in listed if n in self.hosts and n not in self.lost]
        if usable != self.pushed and not self._initial:
            self.pushed = usable
            self._push(usable)

    def close(self) -> None:
        for probe in self._probes.values():
            probe.kill()
        self._probes.clear()

    def _probe(self, name: str) -> None:
        if hostlib.is_local(name):
            self.hosts[name] = Host(name, self.address, self.iface, local=True)
            self.lost.pop(name, None)
            return
        layout = self.layout
        try:
            argv = probe_command(name, 0, layout.ssh, layout.subnet, layout.iface)
        except RemoteError as exc:
            self._event(f"{name} cannot be used: {exc}")
            return
        probe = self._probes[name] = BackgroundProbe(name, argv)
        self._watch(probe, lambda: self._on_probe(probe))

    def _on_probe(self, probe: BackgroundProbe) -> None:
        if not probe.read():
            return
        self._unwatch(probe)
        del self._probes[probe.name]
        reply, why = probe.result()
        name = probe.name
        self._initial.discard(name)
        if reply is None:
            self._retry_at[name] = time.monotonic() + PROBE_RETRY_S
            if name not in self.lost:
                self.lost[name] = f"its probe failed: {why}"
                self._event(f"{name} cannot be used yet: {why}")
            self.refresh()
            return
        came_back = name in self.lost
        self.lost.pop(name, None)
        self.hosts[name] = Host(name, reply.address, reply.iface, local=False)
        self._allow([reply.address])
        self._event(f"{name} {'answers again' if came_back else 'answers'} "
                    f"({reply.address}, {reply.iface or 'interface unknown'})")
        self.refresh()
