"""The elastic driver helper (Horovod's ElasticDriver as a library) driven over its socketpair by a
stand-in for the launcher that starts real ``hvd.elastic`` workers on START and reports their
real exit codes: rank order, restarting a failed slot, blacklisting a blamed host until its
cooldown ends, a host leaving and rejoining HOSTS, a new worker that never reaches hvd.init()
(--start-timeout), the reset limit, FATAL below -np/--min-np,
exit when the launcher goes away, the rendezvous secret and ALLOW.

Two "hosts" (hA, hB) are names on this machine (HOROVOD_GLOO_IFACE=lo), as Horovod allows. The
stand-in speaks the launcher's contract: it sends typed records through ``helper_frames.encode``
and reads every line with ``helper_frames.decode``, so a frame the helper writes that the
launcher could not read fails here."""
import dataclasses
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from popdist_launcher.launcher.layout import ports
from popdist_launcher.wire import helper_frames, netinfo, rendezvous

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).parent / "workers" / "elastic_probe.py"
TWO_HOSTS = [["hA", 1], ["hB", 1]]
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "PMIX_"))}


class FakeLauncher:
    """The launcher's end of the protocol: HOSTS, START -> a real worker, STOP -> SIGTERM, and
    one EXITED per START with the worker's exit code and the blame ``blame(start, code)``."""

    def __init__(self, tmp_path: Path, settings: dict, worker_env: Optional[dict] = None,
                 address: str = "127.0.0.1") -> None:
        self.tmp_path = tmp_path
        self.control, helper_end = socket.socketpair()
        listener = ports.listen_socket(address)
        self.port = listener.getsockname()[1]
        self.secret = rendezvous.new_secret()
        self.worker_env = worker_env or {}
        self.log_path = tmp_path / "helper.log"
        settings = {"np": 2, "min_np": 1, "max_np": 2, "elastic_timeout": 60,
                    "reset_limit": None, "cooldown_range": None, "allowed": ["127.0.0.1"],
                    "failure_limit": 3,
                    **settings}
        with open(self.log_path, "w") as log:
            self.helper = subprocess.Popen(
                [sys.executable, "-m", "popdist_launcher.launcher.elastic.helper.elastic_driver",
                 str(helper_end.fileno()), str(listener.fileno()), json.dumps(settings)],
                cwd=ROOT, pass_fds=(helper_end.fileno(), listener.fileno()), stdout=log,
                stderr=log, start_new_session=True,
                env=dict(os.environ, POPRUN_RENDEZVOUS_SECRET=self.secret,
                         POPRUN_ELASTIC_DRIVER_LOG="INFO"))
        helper_end.close()
        listener.close()
        self.frames: List[dict] = []  # every frame received, with "t": time of arrival
        self.sent: List[dict] = []  # every frame sent, with "t"
        self.workers: Dict[int, subprocess.Popen] = {}
        self.stopped: set = set()
        self._pending = b""

    def send(self, kind: str, **fields) -> None:
        """Send the launcher's frame ``kind`` as the launcher does (the typed record, encoded)."""
        record = helper_frames.KINDS[kind](**fields)
        assert isinstance(record, helper_frames.TO_HELPER), kind
        self.sent.append({"kind": kind, **fields, "t": time.time()})
        self.control.sendall(helper_frames.encode(record))

    def receive(self, wait: float) -> List[dict]:
        frames = []
        if select.select([self.control], [], [], wait)[0]:
            data = self.control.recv(65536)
            if not data:
                raise AssertionError("the helper closed its end\n" + self.log_tail())
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                record = helper_frames.decode(line)  # as the launcher reads it: typed, checked
                assert isinstance(record, helper_frames.TO_LAUNCHER), record
                if isinstance(record, helper_frames.Alive):  # the heartbeat
                    continue
                frame = {"kind": record.KIND, **dataclasses.asdict(record)}
                self.frames.append({**frame, "t": time.time()})
                frames.append(frame)
        return frames

    def run(self, blame: Callable[[dict, int], str], timeout: float = 240,
            on_frame: Callable[[dict], None] = lambda frame: None) -> dict:
        """Serve the helper until DONE; return DONE."""
        starts = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for frame in self.receive(0.05):
                on_frame(frame)
                if frame["kind"] == "START":
                    starts[frame["wid"]] = frame
                    self.workers[frame["wid"]] = self._start(frame)
                elif frame["kind"] == "STOP":
                    self.stopped.add(frame["wid"])
                    if self.workers[frame["wid"]].poll() is None:
                        self.workers[frame["wid"]].terminate()
                elif frame["kind"] == "DONE":
                    return frame
            for wid, worker in list(self.workers.items()):
                code = worker.poll()
                if code is not None:
                    del self.workers[wid]
                    code = 128 - code if code < 0 else code
                    self.send("EXITED", wid=wid, code=code, how="exited",
                              what=f"exited with {code}",
                              blame="none" if wid in self.stopped else blame(starts[wid], code))
        raise AssertionError("no DONE from the helper\n" + self.log_tail())

    def _start(self, start: dict) -> subprocess.Popen:
        env = dict(BASE_ENV, PYTHONUNBUFFERED="1", PROBE_DIR=str(self.tmp_path),
                   HOROVOD_HOSTNAME=start["hostname"], HOROVOD_ELASTIC="1",
                   HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
                   HOROVOD_GLOO_RENDEZVOUS_ADDR=rendezvous.client_address(
                       "127.0.0.1", self.port, self.secret),
                   HOROVOD_GLOO_RENDEZVOUS_PORT=str(self.port), HOROVOD_GLOO_IFACE="lo",
                   HOROVOD_GLOO_TIMEOUT_SECONDS="90", POPRUN_RESTART_COUNT=str(start["round"]),
                   **{f"HOROVOD_{k.upper()}": str(start[k]) for k in (
                       "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")},
                   **self.worker_env)
        with open(self.tmp_path / f"worker-{start['wid']}.log", "w") as log:
            return subprocess.Popen([sys.executable, str(PROBE)], env=env, cwd=self.tmp_path,
                                    stdout=log, stderr=subprocess.STDOUT)

    def kinds(self, *kinds: str) -> List[dict]:
        return [{k: v for k, v in f.items() if k != "t"} for f in self.frames
                if f["kind"] in kinds]

    def log_tail(self) -> str:
        return self.log_path.read_text()[-4000:]

    def close(self) -> None:
        for worker in self.workers.values():
            worker.kill()
            worker.wait()
        self.control.close()
        try:
            self.helper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.helper.pid, signal.SIGKILL)
            self.helper.wait()


@pytest.fixture
def launcher(tmp_path):
    made = []

    def make(settings: dict, worker_env: Optional[dict] = None, **kwargs) -> FakeLauncher:
        made.append(FakeLauncher(tmp_path, settings, worker_env, **kwargs))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


def done_files(tmp_path: Path) -> List[dict]:
    return sorted((json.loads(p.read_text()) for p in tmp_path.glob("done-*.json")),
                  key=lambda d: d["rank"])


def start(wid: int, round: int, hostname: str, rank: int, size: int = 2) -> dict:
    return {"kind": "START", "wid": wid, "round": round, "hostname": hostname, "rank": rank,
            "size": size, "local_rank": 0, "local_size": 1, "cross_rank": rank,
            "cross_size": size}


def round_frame(number: int, hosts: list) -> dict:
    return {"kind": "ROUND", "round": number, "size": sum(n for _, n in hosts), "hosts": hosts}


def without_t(frames: List[dict]) -> List[dict]:
    return [{k: v for k, v in f.items() if k != "t"} for f in frames]


def phases(sizes: List[int]) -> List[int]:
    """The world sizes of a lineage, one per run of equal sizes (the last steps can be at size
    1: a worker that has run enough steps ends as soon as its world is whole again)."""
    return [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]


def report_restart(fake: FakeLauncher, failed_wid: int) -> None:
    """Print how long after the failed worker's EXITED the next START came (for the report)."""
    exited = next(f["t"] for f in fake.sent if f["kind"] == "EXITED" and f["wid"] == failed_wid)
    following = [f["t"] for f in fake.frames if f["kind"] == "START" and f["t"] > exited]
    if following:
        print(f"next START {following[0] - exited:.3f} s after EXITED of worker {failed_wid}")


@pytest.mark.slow
def test_a_failed_slot_on_a_live_host_is_started_again_and_the_job_finishes(launcher, tmp_path):
    # --min-np 2: hA alone cannot carry the job, so hB's failed worker is started again there.
    fake = launcher({"min_np": 2}, {"PROBE_FAIL": "hB:8:9"})
    fake.send("HOSTS", hosts=TWO_HOSTS)
    done = fake.run(lambda start, code: "slot")
    # Ranks follow HOSTS (Horovod alone orders new hosts through a set); ROUND comes first.
    assert fake.kinds("ROUND", "START")[0] == round_frame(1, TWO_HOSTS)
    first = sorted(fake.kinds("START")[:2], key=lambda f: f["rank"])
    assert {f["wid"] for f in first} == {1, 2}
    assert first == [start(first[0]["wid"], 1, "hA", 0), start(first[1]["wid"], 1, "hB", 1)]
    hb = first[1]["wid"]
    assert [(f["wid"], f["code"], f["blame"]) for f in fake.sent if f["kind"] == "EXITED"][0] \
        == (hb, 9, "slot")
    # The slot is started again in round 2, with the same rank; nothing is blacklisted.
    assert fake.kinds("ROUND")[1:] == [round_frame(2, TWO_HOSTS)]
    assert fake.kinds("START")[2:] == [start(3, 2, "hB", 1)]
    assert fake.kinds("BLACKLIST", "STOP", "FATAL") == []
    assert fake.kinds("RETRY") == [{
        "kind": "RETRY", "host": "hB", "wid": hb, "streak": 1, "limit": 3,
        "sentence": f"instance {hb} on hB exited with 9; restarting in place (failure 1 of "
                    f"--host-failure-limit 3, counted again from 1 after progress)"}]
    assert done["error"] is None
    assert {name: code for name, (code, _) in done["results"].items()} == {"hA[0]": 0, "hB[0]": 0}
    # Both finished at size 2 with the same state: 20 steps of size 2 (the 8 steps before the
    # failure were committed; nothing was lost, nothing done twice in the lineage).
    finals = done_files(tmp_path)
    assert [(d["host"], d["rank"], d["size"]) for d in finals] == [("hA", 0, 2), ("hB", 1, 2)]
    for d in finals:
        assert d["step"] == 20 and d["sizes"] == [2] * 20 and d["total"] == 40.0
    report_restart(fake, hb)
    print(f"first START {fake.frames[1]['t'] - fake.sent[0]['t']:.3f} s after HOSTS")


@pytest.mark.slow
def test_a_blamed_host_is_blacklisted_and_comes_back_after_its_cooldown(launcher, tmp_path):
    fake = launcher({"cooldown_range": [1, 2]}, {"PROBE_FAIL": "hB:8:9"})
    fake.send("HOSTS", hosts=TWO_HOSTS)
    done = fake.run(lambda start, code: "host" if code else "none")
    hb = next(f["wid"] for f in fake.kinds("START") if f["hostname"] == "hB")
    blacklist = fake.kinds("BLACKLIST")
    assert [f["host"] for f in blacklist] == ["hB"]
    assert 1 <= blacklist[0]["cooldown"] <= 2  # Horovod's formula within --blacklist-cooldown-range
    # Round 2 goes on with hA alone (nothing to start), round 3 takes hB back at rank 1.
    assert fake.kinds("ROUND") == [round_frame(1, TWO_HOSTS), round_frame(2, [["hA", 1]]),
                                   round_frame(3, TWO_HOSTS)]
    assert fake.kinds("START")[2:] == [start(3, 3, "hB", 1)]
    assert [(f["wid"], f["code"], f["blame"]) for f in fake.sent if f["kind"] == "EXITED"][0] \
        == (hb, 9, "host")
    assert fake.kinds("STOP", "FATAL") == []
    assert done["error"] is None
    assert {name: code for name, (code, _) in done["results"].items()} == {"hA[0]": 0, "hB[0]": 0}
    finals = done_files(tmp_path)
    assert [(d["host"], d["rank"], d["size"]) for d in finals] == [("hA", 0, 2), ("hB", 1, 2)]
    assert finals[0]["sizes"] == finals[1]["sizes"]  # hB got hA's state when it joined
    sizes = finals[0]["sizes"]  # 8 committed steps at 2, never redone, then hA alone, then 2
    assert sizes[:8] == [2] * 8 and phases(sizes) in ([2, 1], [2, 1, 2])
    assert finals[0]["total"] == float(sum(sizes)) and finals[0]["step"] == len(sizes) >= 20
    exited = next(f["t"] for f in fake.sent if f["kind"] == "EXITED" and f["wid"] == hb)
    back = next(f["t"] for f in fake.frames if f["kind"] == "ROUND" and f["round"] == 3)
    print(f"cooldown {blacklist[0]['cooldown']} s; round 3 {back - exited:.2f} s after EXITED")


@pytest.mark.slow
def test_a_host_the_launcher_stops_listing_leaves_and_rejoins_when_listed_again(launcher,
                                                                                 tmp_path):
    hold = tmp_path / "hold"
    hold.write_text("")
    fake = launcher({}, {"PROBE_HOLD": str(hold)})

    def membership(frame: dict) -> None:
        if frame["kind"] == "START" and frame["wid"] == 2:
            fake.send("HOSTS", hosts=[["hA", 1]])  # e.g. the discovery script dropped hB
        elif frame["kind"] == "ROUND" and frame["round"] == 2:
            fake.send("HOSTS", hosts=TWO_HOSTS)
        elif frame["kind"] == "ROUND" and frame["round"] == 3:
            hold.unlink()

    fake.send("HOSTS", hosts=TWO_HOSTS)
    done = fake.run(lambda start, code: "slot", on_frame=membership)
    assert fake.kinds("ROUND") == [round_frame(1, TWO_HOSTS), round_frame(2, [["hA", 1]]),
                                   round_frame(3, TWO_HOSTS)]
    assert fake.kinds("START")[2:] == [start(3, 3, "hB", 1)]
    # The first hB learnt at a commit that it was no longer in the job, and failed its init.
    first_hb = next(f for f in fake.kinds("START") if f["hostname"] == "hB")["wid"]
    assert "hB[0] has been removed from elastic job" in (
        tmp_path / f"worker-{first_hb}.log").read_text()
    assert fake.kinds("BLACKLIST", "STOP", "FATAL") == []
    assert done["error"] is None
    assert {name: code for name, (code, _) in done["results"].items()} == {"hA[0]": 0, "hB[0]": 0}
    finals = done_files(tmp_path)
    assert [(d["host"], d["rank"], d["size"]) for d in finals] == [("hA", 0, 2), ("hB", 1, 2)]
    sizes = finals[0]["sizes"]
    assert finals[1]["sizes"] == sizes and phases(sizes) in ([2, 1], [2, 1, 2])
    assert finals[0]["total"] == float(sum(sizes))


@pytest.mark.slow
def test_a_new_worker_that_does_not_reach_hvd_init_within_the_start_timeout_fails_its_host(
        launcher, tmp_path):
    """hB joins a running job and its worker never reaches hvd.init(): hA, held in its
    rank_and_size request, is not sent into Gloo's rendezvous; after --start-timeout the
    worker is stopped and counts as hB's failure (hA carries --min-np 1: blacklisted), and the
    round forms again with hA alone, which goes on from its state."""
    hold = tmp_path / "hold"
    hold.write_text("")
    fake = launcher({"np": 1, "start_timeout": 3},
                    {"PROBE_HOLD": str(hold), "PROBE_FULL": "1", "PROBE_STALL": "hB"})

    def membership(frame: dict) -> None:
        if frame["kind"] == "START" and frame["wid"] == 1:
            fake.send("HOSTS", hosts=TWO_HOSTS)
        elif frame["kind"] == "ROUND" and frame["round"] == 3:
            hold.unlink()

    fake.send("HOSTS", hosts=[["hA", 1]])
    done = fake.run(lambda start, code: "slot", on_frame=membership)
    assert fake.kinds("ROUND") == [round_frame(1, [["hA", 1]]), round_frame(2, TWO_HOSTS),
                                   round_frame(3, [["hA", 1]])]
    assert fake.kinds("START") == [start(1, 1, "hA", 0, 1), start(2, 2, "hB", 1)]
    assert fake.kinds("STOP") == [{"kind": "STOP", "wid": 2}]
    assert fake.kinds("BLACKLIST") == [{"kind": "BLACKLIST", "host": "hB", "cooldown": None,
                                        "forever": False, "limit": 3}]
    assert fake.kinds("FATAL", "RETRY") == []
    assert done["error"] is None
    assert {name: code for name, (code, _) in done["results"].items()} == {"hA[0]": 0}
    finals = done_files(tmp_path)  # the one hA worker, never restarted
    assert [(d["host"], d["rank"], d["size"]) for d in finals] == [("hA", 0, 1)]
    assert set(finals[0]["sizes"]) == {1} and finals[0]["total"] == len(finals[0]["sizes"])
    stopped = next(f["t"] for f in fake.frames if f["kind"] == "STOP")
    round2 = next(f["t"] for f in fake.frames if f["kind"] == "ROUND" and f["round"] == 2)
    print(f"STOP {stopped - round2:.2f} s after round 2 (--start-timeout 3)")


@pytest.mark.slow
def test_a_failure_beyond_the_reset_limit_ends_the_job_with_the_limit_as_error(launcher):
    fake = launcher({"reset_limit": 0, "min_np": 2}, {"PROBE_FAIL": "hB:8:9"})
    fake.send("HOSTS", hosts=TWO_HOSTS)
    done = fake.run(lambda start, code: "slot")
    assert done["error"] == ("Horovod was shutdown because number of resets during elastic job "
                             "exceeded limit: 0")
    assert len(fake.kinds("ROUND")) == 1 and len(fake.kinds("START")) == 2
    assert fake.kinds("BLACKLIST", "FATAL") == []
    # hA is stopped unless it ended first (it may fail its rendezvous once the driver stopped).
    ha = next(f["wid"] for f in fake.kinds("START") if f["hostname"] == "hA")
    assert fake.kinds("STOP") in ([{"kind": "STOP", "wid": ha}], [])
    assert done["results"]["hB[0]"][0] == 9  # the failure that ended the job
    assert set(done["results"]) == {"hA[0]", "hB[0]"}


@pytest.mark.slow
def test_below_min_np_for_the_elastic_timeout_is_fatal(launcher, tmp_path):
    fake = launcher({"min_np": 2, "elastic_timeout": 3}, {"PROBE_FAIL": "hB:8:9"})
    fake.send("HOSTS", hosts=TWO_HOSTS)
    done = fake.run(lambda start, code: "host")
    reason = ("fewer than --min-np 2 slots were usable for --elastic-timeout 3 s (usable now: "
              "hA:1; blacklisted: hB).")
    assert fake.kinds("BLACKLIST") == [{"kind": "BLACKLIST", "host": "hB", "cooldown": None,
                                        "forever": False, "limit": 3}]
    assert fake.kinds("FATAL") == [{"kind": "FATAL", "reason": reason}]
    assert done["error"] == reason
    fatal = fake.kinds("ROUND", "START", "BLACKLIST", "FATAL", "STOP", "DONE")
    assert [f["kind"] for f in fatal[fatal.index({"kind": "FATAL", "reason": reason}):]] in (
        ["FATAL", "STOP", "DONE"], ["FATAL", "DONE"])  # hA stopped, or ended on its own
    assert len(fake.kinds("ROUND")) == 1 and len(fake.kinds("START")) == 2
    assert done_files(tmp_path) == []


def test_the_first_round_below_np_is_fatal(launcher):
    fake = launcher({"np": 2, "min_np": 2, "elastic_timeout": 1})
    fake.send("HOSTS", hosts=[["hA", 1]])
    done = fake.run(lambda start, code: "slot", timeout=120)
    reason = ("fewer than -np 2 slots were usable for --elastic-timeout 1 s (usable now: hA:1).")
    assert fake.kinds("FATAL") == [{"kind": "FATAL", "reason": reason}]
    assert done == {"kind": "DONE", "error": reason, "results": {}}
    assert fake.kinds("ROUND", "START") == []
    assert fake.helper.wait(timeout=30) == 1


def test_the_helper_exits_when_the_launcher_closes_its_end(launcher):
    fake = launcher({})
    fake.send("HOSTS", hosts=TWO_HOSTS)
    while len(fake.kinds("START")) < 2:  # two worker threads now wait for EXITED
        fake.receive(1)
    closed = time.monotonic()
    fake.control.close()
    assert fake.helper.wait(timeout=60) == 0
    print(f"helper gone {time.monotonic() - closed:.3f} s after the launcher closed its end")


def test_the_rendezvous_answers_only_the_secret_and_allowed_addresses(launcher):
    # A non-loopback address of this machine, refused until the launcher sends ALLOW for it.
    address = next(a for _, a in netinfo.interface_addresses() if not a.startswith("127."))
    fake = launcher({"allowed": ["10.255.255.254"], "elastic_timeout": 600}, address=address)
    fake.send("HOSTS", hosts=[["hA", 1]])  # the driver waits for -np 2 slots: no round yet

    def request(method: str, path: str, body: bytes = None):
        conn = http.client.HTTPConnection(address, fake.port, timeout=60,
                                          source_address=(address, 0))
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    good = f"/{fake.secret}:{fake.port}"
    with pytest.raises(http.client.RemoteDisconnected):  # closed unanswered
        request("GET", f"{good}/global/0")
    fake.send("ALLOW", addresses=[address])
    deadline = time.monotonic() + 60
    while True:  # the helper reads ALLOW on its own thread
        try:
            assert request("GET", f"{good}/global/0")[0] == 404  # the store itself, reached
            break
        except http.client.RemoteDisconnected:
            assert time.monotonic() < deadline, "ALLOW did not open the rendezvous"
            time.sleep(0.1)
    assert request("GET", "/rank_and_size/hA:0")[0] == 403
    assert request("PUT", "/worker_addresses/hA:0", b"poison")[0] == 403
    assert request("PUT", f"/{rendezvous.new_secret()}:{fake.port}/global/0", b"x")[0] == 403
    assert request("GET", f"{good}/global/0")[0] == 404  # none of that reached the store
    assert request("PUT", f"{good}/global/0", b"rank 0")[0] == 200
    assert request("GET", f"{good}/global/0") == (200, b"rank 0")
    fake.receive(0.5)
    assert fake.kinds("ROUND", "START", "FATAL") == []  # one slot of two: nothing started


def test_the_driver_builds_the_host_manager_named_in_its_module():
    # The helper replaces horovod.runner.elastic.driver.HostManager before building the driver.
    import inspect

    from horovod.runner.elastic import driver
    assert "self._host_manager = HostManager(discovery, cooldown_range)" in inspect.getsource(
        driver.ElasticDriver.__init__)


def test_rank_order_follows_hosts_and_a_failure_blacklists_when_others_carry_the_job():
    from popdist_launcher.launcher.elastic import failure_policy
    from popdist_launcher.launcher.elastic.helper import driver_hosts
    from popdist_launcher.launcher.elastic.helper.launcher_link import LauncherLink

    Verdict = driver_hosts.Verdict
    discovery = driver_hosts.PushedHosts()
    manager = driver_hosts.LauncherHostManager(discovery, (1, 2))
    ours, theirs = socket.socketpair()
    manager.link = LauncherLink(ours)
    ended: List[str] = []
    manager.min_np, manager.give_up = 7, ended.append
    manager.streaks = failure_policy.FailureStreaks(2)
    names = [f"node{i:02d}" for i in (7, 3, 11, 0, 5, 9, 1, 4)]  # a set would shuffle them
    discovery.push([[name, 1] for name in names[:5]])
    manager.update_available_hosts()
    assert manager.current_hosts.host_assignment_order == names[:5]
    # Hosts of the previous assignment keep their ranks; new ones follow in HOSTS order.
    discovery.push([[name, 1] for name in reversed(names)])
    manager.update_available_hosts()
    assert manager.current_hosts.host_assignment_order == names[:5] + names[:4:-1]
    # A failed worker blacklists its host while the 7 others carry --min-np 7; a blamed host
    # is blacklisted whatever the others offer.
    manager.blame(("node03", 0), Verdict(1, False, 0, "exited with 1"))
    manager.blacklist("node03")
    manager.blame(("node11", 0), Verdict(2, True, 0, "could not start"))
    manager.blacklist("node11")
    manager.blacklist("node11")  # the registry calls it once per failed slot: one frame
    assert manager.is_blacklisted("node03") and manager.is_blacklisted("node11")
    assert "node11" not in manager.current_hosts.host_assignment_order
    # 6 hosts left: a failure is started again in place, bounded by --host-failure-limit 2;
    # a failure after progress (the job's progress mark grew: commits) starts the count over.
    for wid, mark in ((3, 0), (4, 5), (5, 5)):
        manager.blame(("node00", 0), Verdict(wid, False, mark, "exited with 9"))
        manager.blacklist("node00")
    assert not manager.is_blacklisted("node00")
    assert ended == ["instance 5 on node00 exited with 9, the 2nd failure of node00 in a row "
                     "without progress (--host-failure-limit 2), and the other hosts cannot "
                     "carry --min-np 7 (5 usable slot(s) without node00)."]
    ours.close()
    frames = [json.loads(line) for line in theirs.makefile().read().splitlines()]
    theirs.close()
    assert [(f["kind"], f["host"]) for f in frames] == [
        ("BLACKLIST", "node03"), ("BLACKLIST", "node11"), ("RETRY", "node00"),
        ("RETRY", "node00")]
    assert 1 <= frames[0]["cooldown"] <= 2
    assert [(f["wid"], f["streak"]) for f in frames[2:]] == [(3, 1), (4, 1)]


def test_workers_that_go_on_keep_the_lowest_ranks():
    """A worker restarted in place on the first host, and a new host's workers, take ranks after
    every worker that goes on through the reset: rank 0 holds the last commit."""
    from horovod.runner.elastic.discovery import DiscoveredHosts

    from popdist_launcher.launcher.elastic.helper import elastic_driver

    class Driver(elastic_driver.LauncherElasticDriver):
        def __init__(self) -> None:  # only what the assignment reads
            self._host_assignments = {}
            self._min_num_proc, self._max_num_proc = 1, None

    def assign(driver, hosts):
        current = DiscoveredHosts(host_slots=dict(hosts), host_assignment_order=list(dict(hosts)))
        by_host, ordered = driver._get_host_assignments(current)
        driver._host_assignments = by_host
        assert [s.rank for s in ordered] == list(range(len(ordered)))
        assert all([s.local_rank for s in slots] == list(range(len(slots)))
                   for slots in by_host.values())
        return [(s.hostname, s.local_rank) for s in ordered]

    driver = Driver()
    assert assign(driver, [("A", 2), ("B", 2)]) == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    # A[0] (rank 0) failed and is started again in place; C joins.
    driver._host_assignments["A"] = driver._host_assignments["A"][1:]
    assert assign(driver, [("A", 2), ("B", 2), ("C", 1)]) == [
        ("A", 1), ("B", 0), ("B", 1), ("A", 0), ("C", 0)]
