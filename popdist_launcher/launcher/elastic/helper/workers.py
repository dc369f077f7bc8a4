"""The helper's workers seam: Horovod's create_worker_fn, each worker a START to the launcher and
its end the launcher's EXITED for it (one thread per worker, as Horovod runs them)."""
from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Dict, List, Optional, Protocol, Set, Tuple

from popdist_launcher.launcher.elastic.helper import horovod_seams as seams
from popdist_launcher.launcher.elastic.helper.driver_hosts import (LauncherHostManager, Slot,
                                                                   Verdict)
from popdist_launcher.launcher.elastic.helper.launcher_link import LauncherLink
from popdist_launcher.wire import helper_frames as frames

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a worker's thread looks at the driver's shutdown and host events


class Rounds(Protocol):
    """What the workers need of the driver (elastic_driver.LauncherElasticDriver): its round,
    and the word when a worker ends."""

    def round(self) -> int: ...

    def joining(self, slot: Slot) -> bool: ...

    def slot_ended(self, slot: Slot) -> None: ...

    def absorb_end(self, slot: Slot) -> bool: ...


class LauncherWorkers:
    """Horovod's create_worker_fn: each worker is a START to the launcher, and its end is the
    launcher's EXITED for it."""

    def __init__(self, link: LauncherLink) -> None:
        self._link = link
        self._driver: Optional[Rounds] = None
        self._host_manager: Optional[LauncherHostManager] = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ended: Dict[int, threading.Event] = {}
        self._exits: Dict[int, Tuple[int, str]] = {}
        self._current: Dict[Slot, int] = {}  # the latest worker id of each slot
        self._stopped: Set[int] = set()  # STOP sent
        self._late: Dict[int, str] = {}  # stopped as failed: how, in words

    def bind(self, driver: Rounds) -> None:
        """The driver whose rounds the workers belong to (built once the first HOSTS came);
        the driver is given the workers with its ``use_workers``."""
        self._driver = driver
        self._host_manager = seams.host_manager(driver)

    def stop_slot(self, slot: Slot) -> None:
        """Stop the latest worker of ``slot`` if it runs (its end is not a failure)."""
        with self._lock:
            wid = self._current.get(slot)
            if wid is None or wid not in self._ended or wid in self._stopped:
                return
            self._stopped.add(wid)
        self._link.send(frames.Stop(wid=wid))

    def mark_late(self, slot: Slot, start_timeout: float) -> None:
        """Stop the latest worker of ``slot``, which did not reach hvd.init() in time: its end
        counts as its failure."""
        with self._lock:
            wid = self._current.get(slot)
            if wid is None or wid not in self._ended:
                return
            self._late[wid] = (f"did not reach hvd.init() within --start-timeout "
                               f"{start_timeout:g} s")
        self.stop_slot(slot)

    def create_worker(self, slot_info, events: List[threading.Event]) -> Tuple[int, float]:
        slot = (slot_info.hostname, slot_info.local_rank)
        ended = threading.Event()
        with self._lock:
            wid = next(self._ids)
            self._ended[wid] = ended
            self._current[slot] = wid
        self._host_manager.blame(slot, None)
        self._link.send(frames.Start(
            wid=wid, round=self._driver.round(), hostname=slot_info.hostname,
            rank=slot_info.rank, size=slot_info.size, local_rank=slot_info.local_rank,
            local_size=slot_info.local_size, cross_rank=slot_info.cross_rank,
            cross_size=slot_info.cross_size))
        while not ended.wait(POLL_S):
            if any(event.is_set() for event in events):
                with self._lock:  # the job ends or the host is blacklisted
                    stop = wid not in self._stopped
                    self._stopped.add(wid)
                if stop:
                    self._link.send(frames.Stop(wid=wid))
        with self._lock:
            code, blame, what, mark = self._exits.pop(wid)
            del self._ended[wid]
            stopped = wid in self._stopped
            self._stopped.discard(wid)
            late = self._late.pop(wid, None)
            latest = self._current.get(slot) == wid
        if latest:
            if late is None and code == 0 and not stopped and self._driver.joining(slot):
                late = "exited 0 before its round formed"  # no success: the round never ran
            failed = late is not None or (code != 0 and blame != "none")
            self._host_manager.blame(slot, Verdict(wid, blame == "host", mark, late or what)
                                     if failed else None)
            self._driver.slot_ended(slot)
            self._driver.absorb_end(slot)  # a new worker whose survivors are held
        return code, time.time()

    def exited(self, wid: int, code: int, blame: str, what: str, mark: int) -> None:
        with self._lock:
            ended = self._ended.get(wid)
            if ended is None:
                log.error("the launcher reported the exit of worker %s, which is not running", wid)
                return
            self._exits[wid] = (code, blame, what, mark)
        ended.set()
