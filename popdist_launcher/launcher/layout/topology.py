"""From host options to a startable layout: which hosts, how many instances each, which backend,
and, for every attempt of the job, the addresses and fresh ports on each host.

``lay_out`` runs once per host set (pure checks, no network). ``Layout.prepare`` runs before
every start (and restart): it reserves local ports, probes remote hosts over ssh (or srun) for
their address, interface and free ports, and binds the rendezvous socket where every host can
reach it.
"""
from __future__ import annotations

import socket
from typing import List, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.layout import ports
from popdist_launcher.launcher.layout.backends import registry
from popdist_launcher.launcher.layout.backends.base import Backend, EngineError, HostOptions
from popdist_launcher.launcher.layout.plan import Host
from popdist_launcher.launcher.layout.remote import RemoteError, SshOptions, probe_hosts

LOOPBACK = "127.0.0.1"


class TopologyError(ValueError):
    """Hosts, slots or backend options that cannot work together; one sentence for the user;
    ``hosts`` names the hosts that could not be reached, when that was the problem."""

    def __init__(self, message: str, hosts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.hosts = tuple(hosts)


class Prepared:
    """One attempt's hosts, ports and rendezvous socket; closing it releases the port locks."""

    def __init__(self, hosts: List[Host], tf_ports: List[int], rendezvous: socket.socket,
                 reservations: Sequence[ports.PortReservation],
                 local_ports: Sequence[int] = ()) -> None:
        self.hosts = hosts
        self.tf_ports = tf_ports
        self.local_ports = list(local_ports)  # ports on the launcher's host (the evaluator's)
        self._rendezvous: Optional[socket.socket] = rendezvous
        self.rendezvous_address: Tuple[str, int] = rendezvous.getsockname()[:2]
        self._reservations = list(reservations)

    def take_rendezvous_socket(self) -> socket.socket:
        sock, self._rendezvous = self._rendezvous, None
        return sock

    def release_binds(self) -> None:
        for reservation in self._reservations:
            reservation.release_binds()

    def __enter__(self) -> "Prepared":
        return self

    def __exit__(self, *exc) -> None:
        if self._rendezvous is not None:
            self._rendezvous.close()
        for reservation in self._reservations:
            reservation.close()


class Layout(NamedTuple):
    slots: Tuple[hostlib.HostSlots, ...]
    counts: Tuple[int, ...]
    backend: Backend
    controller: str
    subnet: Optional[str]
    iface: Optional[str]
    ssh: SshOptions

    @property
    def used(self) -> List[Tuple[hostlib.HostSlots, int]]:
        return hostlib.used_hosts(self.slots, self.counts)

    def instance_hosts(self) -> Tuple[str, ...]:
        """Each instance's host name for --tag-output-host (this machine's name for localhost)."""
        names: List[str] = []
        for slot, count in self.used:
            name = socket.gethostname() if slot.name in hostlib.LOCAL_NAMES else slot.name
            names.extend([name] * count)
        return tuple(names)

    @property
    def all_local(self) -> bool:
        return all(hostlib.is_local(h.name) for h, _ in self.used)

    def prepare(self, port_range: Optional[Tuple[int, int]] = None,
                local_ports: int = 0) -> Prepared:
        """Hosts and ports of one attempt, plus ``local_ports`` more on the launcher's host."""
        if self.all_local:
            return self._prepare_local(port_range, local_ports)
        return self._prepare_multi_host(port_range, local_ports)

    def _prepare_local(self, port_range, local_ports: int) -> Prepared:
        address, iface = LOOPBACK, "lo"
        if self.subnet or self.iface:
            address, iface = launcher_address(self.subnet, self.iface, None)
        reservation = ports.reserve(sum(self.counts) + local_ports, port_range=port_range)
        try:
            rendezvous = ports.listen_socket(address)
        except ports.PortError:
            reservation.close()
            raise
        chosen = [Host(h.name, address, iface, local=True) for h, _ in self.used]
        taken = list(reservation.ports)
        return Prepared(chosen, taken[:sum(self.counts)], rendezvous, [reservation],
                        taken[sum(self.counts):])

    def _prepare_multi_host(self, port_range, local_ports: int) -> Prepared:
        remote = [(h, n) for h, n in self.used if not hostlib.is_local(h.name)]
        try:
            probes = probe_hosts([h.name for h, _ in remote], [n for _, n in remote], self.ssh,
                                 subnet=self.subnet, iface=self.iface, port_range=port_range)
            peer = probes[remote[0][0].name].address
        except RemoteError as exc:
            raise TopologyError(str(exc), exc.hosts) from None
        address, iface = launcher_address(self.subnet, self.iface, peer)
        if self.controller == "gloo":
            for name, probe in probes.items():
                if probe.hostname_address.startswith("127."):
                    console.warn(f"on {name}, the host name {probe.hostname!r} resolves to "
                                 f"{probe.hostname_address}; Horovod's Gloo binds that address "
                                 f"for its process sets, so hvd.init() across hosts will fail. "
                                 f"Map the name to {probe.address} in that host's /etc/hosts, "
                                 f"or use --backend mpi.")
        reservations, chosen, tf_ports = [], [], []
        try:
            for slot, count in self.used:
                if hostlib.is_local(slot.name):
                    reservation = ports.reserve(count, port_range=port_range)
                    reservations.append(reservation)
                    chosen.append(Host(slot.name, address, iface, local=True))
                    tf_ports.extend(reservation.ports)
                else:
                    probe = probes[slot.name]
                    chosen.append(Host(slot.name, probe.address, probe.iface, local=False))
                    tf_ports.extend(probe.ports)
            extra = []
            if local_ports:
                reservations.append(ports.reserve(local_ports, port_range=port_range))
                extra = list(reservations[-1].ports)
            rendezvous = ports.listen_socket(address)
        except BaseException:
            for reservation in reservations:
                reservation.close()
            raise
        return Prepared(chosen, tf_ports, rendezvous, reservations, extra)


def launcher_address(subnet: Optional[str], iface: Optional[str],
                     peer: Optional[str]) -> Tuple[str, str]:
    """The launcher host's (address, interface) in ``subnet`` / on ``iface``, or the one that
    reaches ``peer``; TopologyError when there is none."""
    from popdist_launcher.wire import netinfo

    try:
        return netinfo.choose(subnet, iface, peer)
    except (netinfo.NetInfoError, OSError, ValueError) as exc:
        raise TopologyError(f"this host (the launcher's): {exc}") from None


def lay_out(num_instances: int, slots: Sequence[hostlib.HostSlots], source: str,
            options: HostOptions, fixed_world: bool = True) -> Layout:
    """``num_instances`` instances on the hosts ``slots`` (named by ``source``, for errors),
    with the backend ``options`` pick for them; an elastic job's (not ``fixed_world``) never
    gets mpirun. TopologyError says what cannot work."""
    try:
        counts = hostlib.allocate(num_instances, slots, options.oversubscribe, source)
    except hostlib.HostError as exc:
        raise TopologyError(str(exc)) from None
    all_local = all(hostlib.is_local(s.name) for s, n in zip(slots, counts) if n)
    backend = registry.pick_backend(options.backend, in_allocation=options.in_allocation,
                                    all_local=all_local, num_instances=num_instances,
                                    mpi_agent=bool(options.ssh.agent), fixed_world=fixed_world)
    try:
        engine, ssh = registry.build(backend, slots, counts, options)
    except EngineError as exc:
        raise TopologyError(str(exc)) from None
    return Layout(tuple(slots), tuple(counts), engine, engine.controller, options.subnet,
                  options.iface, ssh)
