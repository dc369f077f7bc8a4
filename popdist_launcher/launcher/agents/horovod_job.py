"""One Horovod elastic job's parts, opened at once by ``open_job``: the output router, the
membership log, the open world and its Supervisor, the driver helper's link, the hosts
(membership, probes) and where they come from (the discovery script's poller, or fixed hosts);
none is ever None. ``HorovodJob.close`` ends them."""
from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import List, Optional, Protocol, Sequence, Tuple

from popdist_launcher.launcher.layout import hosts as hostlib
from popdist_launcher.launcher.supervision.attempt import Instance
from popdist_launcher.launcher.elastic.discovery.poller import FixedHosts, HostSource, Poller
from popdist_launcher.launcher.elastic.driver_link import DriverLink
from popdist_launcher.launcher.elastic.horovod_hosts import Hosts, HostProbes
from popdist_launcher.launcher.elastic.membership import Blacklist, Membership, MembershipLog
from popdist_launcher.launcher.options import JobOptions
from popdist_launcher.launcher.output.routing import Router
from popdist_launcher.launcher.layout.plan import LaunchPlan
from popdist_launcher.launcher.layout.remote import RemoteError, resolve
from popdist_launcher.launcher.supervision.supervisor import Supervisor
from popdist_launcher.launcher.layout.topology import LOOPBACK
from popdist_launcher.launcher.supervision.world import OpenWorld
from popdist_launcher.wire.helper_settings import HelperSettings

DISCOVERY_INTERVAL_S = 1.0  # horovodrun's
DISCOVERY_TIMEOUT_S = 10.0


class JobEvents(Protocol):
    """What the job's parts tell the agent (``elastic_horovod.py``)."""

    def worker_ended(self, inst: Instance, how: str, detail: str) -> None: ...

    def stopping(self) -> None: ...

    def progressed(self, inst: Instance, step: int) -> None: ...

    def deadline(self) -> Optional[float]: ...

    def expired(self, now: float) -> None: ...

    def push_hosts(self, hosts: Hosts) -> None: ...

    def allow(self, addresses: List[str]) -> None: ...

    def event(self, text: str) -> None: ...

    def on_driver(self) -> None: ...

    def on_poll(self) -> None: ...


@dataclass
class HorovodJob:
    """The parts of one Horovod job, all open until ``close``."""

    router: Router
    log: MembershipLog
    world: OpenWorld
    supervisor: Supervisor
    driver: DriverLink
    membership: Membership
    probes: HostProbes
    poller: HostSource  # the discovery script's Poller, or FixedHosts

    def close_driver_socket(self) -> None:
        """Stop listening to the driver helper (its process is ended by ``close``)."""
        if self.driver.sock is not None:
            self.supervisor.unwatch(self.driver)
            self.driver.close_socket()

    def close(self) -> None:
        self.close_driver_socket()
        self.driver.close()
        self.poller.close()
        self.probes.close()
        self.router.close_all()


@dataclass(frozen=True)
class Where:
    """Where the launcher meets the job: its address and interface, the hosts -H gives
    ((name, slots)), those of them that are remote, and whether workers may run on other hosts."""

    address: str
    iface: Optional[str]
    initial: Sequence[Tuple[str, int]]
    remote: Sequence[str]
    multi_host: bool


def open_job(options: JobOptions, job_id: str, secret: str, where: Where,
             listener: socket.socket, events: JobEvents) -> HorovodJob:
    """Open the job's parts (the driver helper starts; the rendezvous is on ``listener``'s port,
    which the helper takes over); what was opened is closed again when a later part fails."""
    layout, elastic = options.layout, options.elastic
    with contextlib.ExitStack() as opened:
        router = Router(0, options.output)
        opened.callback(router.close_all)
        world = OpenWorld(events.worker_ended, events.stopping, remote=where.multi_host,
                          on_progress=events.progressed, timer=events)
        supervisor = Supervisor(base_plan(options, job_id, secret, where.address,
                                          listener.getsockname()[1]),
                                layout.backend, router, timeout=options.timeout,
                                hang_timeout=options.hang_timeout,
                                hang_busy_timeout=options.hang_busy_timeout, world=world)
        driver = DriverLink(listener, driver_settings(options, where), secret)
        opened.callback(driver.close)
        supervisor.watch(driver, events.on_driver)
        poller: HostSource = FixedHosts()
        if elastic.discovery_script:
            poller = Poller(elastic.discovery_script, elastic.slots_per_host,
                            interval=DISCOVERY_INTERVAL_S,
                            timeout=min(DISCOVERY_TIMEOUT_S, options.start_timeout))
            opened.callback(poller.close)
        membership = Membership(list(where.initial), Blacklist(None))
        probes = HostProbes(layout, where.address, where.iface, membership.usable,
                            push=events.push_hosts, allow=events.allow, event=events.event,
                            watch=supervisor.watch, unwatch=supervisor.unwatch,
                            initial=where.remote)
        opened.pop_all()
    return HorovodJob(router, MembershipLog(options.output.output_dir), world, supervisor,
                      driver, membership, probes, poller)


def base_plan(options: JobOptions, job_id: str, secret: str, address: str,
              port: int) -> LaunchPlan:
    """The open world's plan: no instance at the start; the rendezvous at ``address:port``."""
    return LaunchPlan(
        program=tuple(options.argv), num_instances=0, num_replicas=0,
        ipus_per_replica=options.ipus_per_replica, instances=(),
        rendezvous_address=address, rendezvous_port=port,
        exported_env=tuple(options.exported_env), start_timeout=options.start_timeout,
        grace_period=options.grace_period, job_id=job_id,
        rendezvous_secret=secret, tf_config_mode="none", placement=options.placement)


def driver_settings(options: JobOptions, where: Where) -> HelperSettings:
    """The driver's settings: horovodrun's elastic options, and the addresses whose
    connections to the rendezvous it accepts."""
    elastic = options.elastic
    allowed = {LOOPBACK, where.address}
    for name, _ in where.initial:
        if not hostlib.is_local(name):
            try:
                allowed.add(resolve(name, options.layout.ssh))
            except RemoteError:
                pass  # its probe names the problem
    return HelperSettings(
        np=options.num_instances, min_np=elastic.min_np, max_np=elastic.max_np,
        elastic_timeout=elastic.elastic_timeout, reset_limit=elastic.reset_limit,
        failure_limit=elastic.host_failure_limit, allowed=sorted(allowed),
        cooldown_range=tuple(elastic.cooldown_range) if elastic.cooldown_range else None,
        start_timeout=options.start_timeout)
