"""Every private name of Horovod's that the driver helper touches, one small function each, and
the one Horovod version check: a different Horovod fails here, in one named place
(tests/test_horovod_seams.py checks each against the installed Horovod)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import horovod
from horovod.runner.common.util import network
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.discovery import HostManager, HostState
from horovod.runner.elastic.worker import WorkerNotificationClient, WorkerNotificationService
from horovod.runner.http.http_server import KVStoreHandler

HOROVOD_SERIES = "0.28."

# The private methods the helper overrides, where Horovod calls them, with their parameters.
# ElasticDriver's (horovod/runner/elastic/driver.py) and the rendezvous handler's.
OVERRIDDEN: Dict[Tuple[type, str], Tuple[str, ...]] = {
    (horovod_driver.ElasticDriver, "_activate_workers"): ("self", "min_num_proc"),
    (horovod_driver.ElasticDriver, "_handle_worker_exit"):
        ("self", "slot_info", "exit_code", "timestamp"),
    (horovod_driver.ElasticDriver, "_get_host_assignments"): ("self", "current_hosts"),
    (horovod_driver.ElasticDriver, "_update_host_assignments"): ("self", "current_hosts"),
    (horovod_driver.ElasticDriver, "_notify_workers_host_changes"):
        ("self", "current_hosts", "update_res"),
    (KVStoreHandler, "_put_value"): ("self", "scope", "key", "value"),
}
# Called by name on the rendezvous handler Horovod builds (create_rendezvous_handler's class).
RENDEZVOUS_OVERRIDDEN = {"_get_rank_and_size": ("self", "host", "local_rank")}
# Public methods Horovod calls that the helper overrides: the worker registry calls the host
# manager's ``blacklist`` once per failed slot.
PUBLIC_OVERRIDDEN: Dict[Tuple[type, str], Tuple[str, ...]] = {
    (HostManager, "blacklist"): ("self", "host"),
    (HostManager, "update_available_hosts"): ("self",),
}
# The private attributes read or written, by the class whose __init__ sets them.
ATTRIBUTES: Dict[type, Tuple[str, ...]] = {
    horovod_driver.ElasticDriver: ("_host_manager", "_wait_hosts_cond", "_worker_clients",
                                   "_worker_registry", "_host_assignments", "_min_num_proc",
                                   "_timeout"),
    HostManager: ("_current_hosts", "_hosts_state"),
    HostState: ("_cooldown_period_end_ts",),
}
# Private methods called, not overridden.
CALLED: Dict[Tuple[type, str], Tuple[str, ...]] = {
    (horovod_driver.ElasticDriver, "_start_worker_processes"): ("self", "pending_slots"),
    (HostState, "_validate_cooldown_range"): ("cooldown_range",),
}
# Private functions of Horovod's driver module called.
FUNCTIONS: Dict[str, Tuple[str, ...]] = {"_epoch_time_s": ()}
# A parent __init__ the helper skips: WorkerNotificationClient's, whose one statement (its
# arguments here) calls BasicClient's, which ``init_notification_client`` calls with a bounded
# probe instead.
SKIPPED_INIT = (WorkerNotificationClient, network.BasicClient)
SKIPPED_INIT_CALL = ("WorkerNotificationService.NAME", "addresses", "key", "verbose",
                     "match_intf=match_intf")


def version_problem() -> Optional[str]:
    """One sentence when the installed Horovod is not the series these seams were written for."""
    if horovod.__version__.startswith(HOROVOD_SERIES):
        return None
    return f"elastic mode needs Horovod {HOROVOD_SERIES}x; found {horovod.__version__}."


def use_host_manager(cls: type) -> None:
    """The one monkeypatch: the host manager class ElasticDriver builds in its __init__."""
    horovod_driver.HostManager = cls


def validate_cooldown_range(cooldown_range: Tuple[int, int]) -> None:
    """Horovod's own check of --blacklist-cooldown-range (raises ValueError)."""
    HostState._validate_cooldown_range(cooldown_range)


def epoch_time_s() -> int:
    """The driver's clock for host-change notices (whole seconds since the epoch)."""
    return horovod_driver._epoch_time_s()


def host_manager(driver):
    return driver._host_manager


def hosts_lock(driver):
    """The driver's condition guarding its hosts, assignments and worker clients."""
    return driver._wait_hosts_cond


def worker_clients(driver) -> dict:
    return driver._worker_clients


def worker_registry(driver):
    return driver._worker_registry


def host_assignments(driver) -> dict:
    return driver._host_assignments


def set_host_assignments(driver, assignments: dict) -> None:
    driver._host_assignments = assignments


def min_num_proc(driver) -> int:
    return driver._min_num_proc


def elastic_timeout(driver) -> float:
    return driver._timeout


def start_worker_processes(driver, pending_slots) -> None:
    driver._start_worker_processes(pending_slots)


def current_hosts(manager):
    """The host manager's DiscoveredHosts (its order is changed in place)."""
    return manager._current_hosts


def cooldown_end(manager, host: str) -> float:
    """When ``host``'s blacklist cooldown ends (Horovod keeps it only in the host's state)."""
    return manager._hosts_state[host]._cooldown_period_end_ts


def never_end_cooldown(manager, host: str) -> None:
    """Keep ``host`` out for the rest of the job."""
    manager._hosts_state[host]._cooldown_period_end_ts = float("inf")


def init_notification_client(client: WorkerNotificationClient, addresses, key,
                             probe_timeout: float) -> None:
    """What WorkerNotificationClient.__init__ does (BasicClient's __init__ for the worker's
    notification service), probing ``addresses`` once for at most ``probe_timeout`` seconds
    instead of three times for 20."""
    network.BasicClient.__init__(client, WorkerNotificationService.NAME, addresses, key, 0,
                                 match_intf=False, probe_timeout=probe_timeout, attempts=1)
