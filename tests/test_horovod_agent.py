"""Horovod mode's agent driven by hand (the fast unit layer of Horovod mode): the running job
(``HorovodRun``) opened with fakes of the driver helper's link, the open world, the Supervisor and
the host probes standing in for the processes, the way Horovod's own driver tests fake
``create_worker_fn``; the real jobs are in test_elastic_horovod.py. Also the worker environment,
a pure function (``horovod_env.py``), and the hosts' sources (a discovery script's poller, or
fixed hosts that do nothing)."""
from __future__ import annotations

import select
import socket

from popdist_launcher.launcher.supervision.attempt import (Instance, InstanceState, JobResult,
                                                           JobState)
from popdist_launcher.launcher.agents.elastic_horovod import (FRAMES, LOST_CODE, NOT_RUN_CODE,
                                                              HorovodRun)
from popdist_launcher.launcher.elastic.driver_link import HelperSocket
from popdist_launcher.launcher.elastic.discovery.poller import FixedHosts
from popdist_launcher.launcher.elastic.horovod_env import GLOO_TIMEOUT_S, JobEnv, worker_env
from popdist_launcher.launcher.agents.horovod_job import HorovodJob
from popdist_launcher.launcher.elastic.membership import Blacklist, Membership, MembershipLog
from popdist_launcher.launcher.output.routing import OutputOptions, Router
from popdist_launcher.launcher.layout.plan import Host
from popdist_launcher.launcher.spawned import peer_sockets
from popdist_launcher.wire import helper_frames as frames
from popdist_launcher.wire.protocol import CUT_PEERS, UNSET_ENV
from test_helper_frames import EXAMPLES  # one record of each kind

RENDEZVOUS = ("127.0.0.1", 4242)


# ---- the worker environment ---------------------------------------------------------------------
def start_frame(wid=0, rank=0, size=2, local_rank=0, local_size=2, round_number=1,
                hostname="hostA"):
    return frames.Start(wid=wid, round=round_number, hostname=hostname, rank=rank, size=size,
                        local_rank=local_rank, local_size=local_size, cross_rank=0, cross_size=1)


def test_worker_env_sets_horovods_slot_and_popdists_replicas_from_the_rank():
    job = JobEnv("job1", 2, 4, RENDEZVOUS, "s" * 32)
    env = worker_env(start_frame(wid=5, rank=3, size=4, local_rank=1, local_size=2,
                                 round_number=3), "eth1", job)
    assert {k: env[k] for k in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
                                "HOROVOD_LOCAL_SIZE", "HOROVOD_HOSTNAME", "HOROVOD_GLOO_IFACE",
                                "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_ELASTIC")} == {
        "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_HOSTNAME": "hostA", "HOROVOD_GLOO_IFACE": "eth1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242", "HOROVOD_ELASTIC": "1"}
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1:4242/" + "s" * 32
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == str(GLOO_TIMEOUT_S)
    # 2 replicas per instance: 8 in all, this worker's from 6; 2 resets before round 3
    assert {k: env[k] for k in ("POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_NUM_LOCAL_REPLICAS",
                                "POPDIST_REPLICA_INDEX_OFFSET", "POPDIST_NUM_IPUS_PER_REPLICA",
                                "POPDIST_NUM_INSTANCES", "POPDIST_INSTANCE_INDEX",
                                "POPRUN_RESTART_COUNT")} == {
        "POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "2",
        "POPDIST_REPLICA_INDEX_OFFSET": "6", "POPDIST_NUM_IPUS_PER_REPLICA": "4",
        "POPDIST_NUM_INSTANCES": "4", "POPDIST_INSTANCE_INDEX": "3", "POPRUN_RESTART_COUNT": "2"}
    assert env[UNSET_ENV] == "TF_CONFIG"  # no fixed cluster in an elastic job


def test_worker_env_lets_x_win_and_keeps_tf_config_when_x_gives_it():
    exported = (("HOROVOD_GLOO_TIMEOUT_SECONDS", "7"), ("TF_CONFIG", "{}"), ("MINE", "1"))
    env = worker_env(start_frame(), None, JobEnv("job1", 1, 1, RENDEZVOUS, "s" * 32,
                                                 exported_env=exported))
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "7" and env["MINE"] == "1"
    assert env["TF_CONFIG"] == "{}" and UNSET_ENV not in env
    assert "HOROVOD_GLOO_IFACE" not in env  # no interface known: Gloo picks


def test_worker_env_places_the_worker_by_its_rank_on_its_host():
    env = worker_env(start_frame(rank=1, local_rank=1), None,
                     JobEnv("job1", 1, 1, RENDEZVOUS, "s" * 32, placement="bind=core"))
    assert env["POPRUN_PLACEMENT"] == "bind=core index=1 local=1/2 replicas=1"
    assert "POPRUN_PLACEMENT" not in worker_env(start_frame(), None,
                                                JobEnv("job1", 1, 1, RENDEZVOUS, "s" * 32))


# ---- the agent, with fakes of its collaborators -------------------------------------------------
class FakeLink:
    """The driver helper's link: what the launcher sends it."""

    def __init__(self):
        self.sent, self.sock, self.closed = [], object(), False

    def send(self, frame):
        self.sent.append(frame)
        return True

    def close_socket(self):
        self.sock = None

    def close(self):
        self.closed = True


class FakeWorld:
    """The open world: instances registered and started, stopped, sent frames, closed."""

    def __init__(self):
        self.instances, self.envs, self.started, self.stopped, self.frames = [], {}, [], [], []
        self.closed = False

    def register(self, host, env, tag, logs=None):
        inst = Instance(len(self.instances), host.name, f"instance {tag}")
        self.instances.append(inst)
        self.envs[tag] = env
        return inst

    def start(self, inst, host):
        self.started.append((inst.index, host.name))

    def stop_instance(self, inst):
        self.stopped.append(inst.index)

    def send_to(self, inst, kind, payload=b""):
        self.frames.append((inst.index, kind, payload))

    def close(self):
        self.closed = True


class FakeSupervisor:
    rendezvous = RENDEZVOUS

    def __init__(self):
        self.rounds, self.stops, self.watched = 0, [], []

    def watch(self, fileobj, callback):
        self.watched.append((fileobj, callback))

    def new_round(self):
        self.rounds += 1

    def request_stop(self, reason):
        self.stops.append(reason)

    def unwatch(self, fileobj):
        pass


class FakeProbes:
    """Every host answers, at its own address, but those lost."""

    def __init__(self, names):
        self.hosts = {n: Host(n, f"10.0.0.{i + 1}") for i, n in enumerate(names)}
        self.pushed = [(n, 2) for n in names]
        self.lost = {}

    def usable(self, name):
        return None if name in self.lost else self.hosts.get(name)

    def lose(self, name, why):
        first = name not in self.lost
        self.lost[name] = why
        return first

    def refresh(self):
        self.refreshed = True

    def close(self):
        pass


class FakePoller:
    """A discovery script's poller: started, watched, read; one answer waiting."""

    def __init__(self, answers):
        self.answers, self.started, self.closed = list(answers), False, False

    def start(self):
        self.started = True

    def watch(self, register, handler):
        register(self, handler)

    def read(self):
        answers, self.answers = self.answers, []
        return answers

    def close(self):
        self.closed = True


def horovod_run(tmp_path, monkeypatch, poller=None):
    """A HorovodRun whose parts are fakes, opened the way ``open_job`` opens the real ones: with
    the run as their events."""
    from popdist_launcher import launch
    from popdist_launcher.launcher import options

    monkeypatch.setenv(peer_sockets.SWITCH_ENV, "1")
    words = ["-np", "3", "--min-np", "2", "--max-np", "4", "-H", "localhost:4",
             "--elastic-mode", "horovod", "--output-dir", str(tmp_path), "true"]
    job_options = options.build(launch.cli.make_context("poprun-lite", words).params,
                                {"PATH": "/usr/bin:/bin"})
    initial = [("hostA", 2), ("hostB", 2)]
    opened = []

    def open_parts(events):
        opened.append(events)
        return HorovodJob(Router(0, OutputOptions()), MembershipLog(str(tmp_path)), FakeWorld(),
                          FakeSupervisor(), FakeLink(), Membership(initial, Blacklist(None)),
                          FakeProbes(["hostA", "hostB"]), poller or FixedHosts())

    run = HorovodRun(job_options, "job1", "s" * 32, None, open_parts)
    assert opened == [run]  # the parts call back into the run that holds them
    return run


def exited(run, wid, code):
    """The world reports that worker ``wid``'s program exited with ``code``."""
    inst = run.workers[wid].inst
    inst.to(InstanceState.CONNECTED)
    inst.returncode = code
    inst.to(InstanceState.EXITED)
    run.worker_ended(inst, "exited", "")


def test_agent_start_exit_retry_blacklist_and_done(tmp_path, monkeypatch):
    run = horovod_run(tmp_path, monkeypatch)
    job, link, world = run.job, run.job.driver, run.job.world
    run.on_frame(frames.Round(round=1, size=3, hosts=[["hostA", 2], ["hostB", 1]]))
    for wid, host, local in ((0, "hostA", 0), (1, "hostA", 1), (2, "hostB", 0)):
        run.on_frame(start_frame(wid, wid, 3, local, 2 if host == "hostA" else 1, 1, host))
    assert job.supervisor.rounds == 1  # the hang clock starts again with each round
    assert world.started == [(0, "hostA"), (1, "hostA"), (2, "hostB")]
    assert world.envs["2"]["HOROVOD_RANK"] == "2"
    assert world.envs["2"]["POPDIST_NUM_INSTANCES"] == "3"

    # the program on hostB fails: the slot is blamed, the survivors' connections cut once
    exited(run, 2, 1)
    assert link.sent[-1] == frames.Exited(wid=2, code=1, how="exited", blame="slot",
                                          what="exited with code 1", mark=0)
    notice = peer_sockets.notice(RENDEZVOUS, ["10.0.0.1", "10.0.0.2"])
    assert world.frames == [(0, CUT_PEERS, notice), (1, CUT_PEERS, notice)]

    # the driver retries the slot (the others cannot carry --min-np without it); it fails again
    run.on_frame(frames.Retry(host="hostB", wid=3, streak=1, limit=2,
                              sentence="hostB[0] exited with 1"))
    run.on_frame(start_frame(3, 2, 3, 0, 1, 1, "hostB"))
    run.progressed(world.instances[0], 4)  # a commit between the two failures
    exited(run, 3, 1)
    assert link.sent[-1].blame == "slot" and link.sent[-1].mark == 1
    assert len(world.frames) == 2  # once a round

    # hostB is blacklisted; round 2 forms on hostA; a START for a lost host never runs
    run.on_frame(frames.Blacklist(host="hostB", cooldown=None, forever=True, limit=2))
    run.on_frame(frames.Round(round=2, size=2, hosts=[["hostA", 2]]))
    job.probes.lost["hostC"] = "no answer"
    run.on_frame(start_frame(4, 0, 2, 0, 1, 2, "hostC"))
    assert link.sent[-1] == frames.Exited(wid=4, code=NOT_RUN_CODE, how="start-failed",
                                          blame="host")
    assert 4 not in run.workers and len(world.instances) == 4

    # the driver stops a worker; then both survivors end well and the driver is done
    run.on_frame(frames.Stop(wid=1))
    assert world.stopped == [1]
    for wid in (0, 1):
        exited(run, wid, 0)
        assert link.sent[-1].blame == "none"
    results = {"hostA[0]": [0, 3.0], "hostA[1]": [0, 3.0], "hostB[0]": [1, 2.0]}
    run.on_frame(frames.Done(error=None, results=results))
    assert world.closed and link.sock is None
    code, text = run.verdict(JobResult(JobState.SUCCEEDED, 0, None, None))
    assert code == 0, text
    assert "job succeeded: round 2's workers on hostA:2 exited 0" in text
    assert "the hosts without a failure (hostA:2) carry --min-np 2" in text
    log = (tmp_path / "membership.log").read_text()
    assert "round 1: 3 instance(s) on hostA:2, hostB:1\n" in log
    assert "instance 2 (rank 2 of 3) on hostB exited with code 1\n" in log
    assert "hostB[0] exited with 1: instance 3's slot is started again (the other hosts " \
        "cannot carry --min-np 2)\n" in log
    assert "hostB blacklisted for the rest of the job (it failed --host-failure-limit 2 " \
        "times in a row without progress)\n" in log
    assert "round 2: 2 instance(s) on hostA:2 (was 3 on hostA:2, hostB:1)\n" in log


def test_agent_lost_worker_loses_its_host_and_a_fatal_frame_stops_the_job(tmp_path, monkeypatch):
    run = horovod_run(tmp_path, monkeypatch)
    job, link = run.job, run.job.driver
    run.on_frame(frames.Round(round=1, size=2, hosts=[["hostA", 1], ["hostB", 1]]))
    run.on_frame(start_frame(0, 0, 2, 0, 1, 1, "hostA"))
    run.on_frame(start_frame(1, 1, 2, 0, 1, 1, "hostB"))
    run.worker_ended(run.workers[1].inst, "lost", "was lost: its host stopped answering")
    assert link.sent[-1] == frames.Exited(wid=1, code=LOST_CODE, how="lost", blame="host",
                                          what="was lost: its host stopped answering", mark=0)
    assert job.probes.lost == {"hostB": "was lost: its host stopped answering"}
    run.on_frame(frames.Alive())
    run.on_frame(frames.Fatal(reason="hostB: too many failures."))
    assert job.supervisor.stops == ["the elastic job cannot go on: hostB: too many failures."]
    code, text = run.verdict(JobResult(JobState.STOPPED, 1, None, None))
    assert code == 1
    assert text.count("job failed: hostB: too many failures. Hosts lost: hostB (was lost: its "
                      "host stopped answering).") == 1


def test_every_kind_is_read_back_as_sent_and_each_of_the_helpers_kinds_has_a_handler(
        tmp_path, monkeypatch):
    """One record of every kind, encoded as the helper encodes it, through the launcher's end
    of a socketpair (HelperSocket.read, in two pieces that split a line) into the agent's
    dispatch: each arrives as the record sent and the handler of its type acts on it; the
    launcher's own kinds have none; a line that is no frame is a FATAL saying why."""
    assert set(FRAMES) == set(frames.TO_LAUNCHER)
    ours, theirs = socket.socketpair()
    link = HelperSocket(ours)
    data = b"".join(frames.encode(f) for f in EXAMPLES) + b'\n{"kind": "HELLO"}\n'
    received = []
    for piece in (data[:100], data[100:]):  # a unix socketpair: each arrives in one piece
        theirs.sendall(piece)
        assert select.select([link], [], [], 5)[0]
        received += link.read()
    assert received == [*EXAMPLES, frames.Fatal(
        reason="the elastic driver sent b'{\"kind\": \"HELLO\"}', which is no message (a "
               "frame of unknown kind)")]
    theirs.close()
    assert select.select([link], [], [], 5)[0] and link.read() is None
    link.close_socket()

    run = horovod_run(tmp_path, monkeypatch)
    job = run.job
    job.probes = FakeProbes(["node0", "node1"])  # the examples' hosts
    log = tmp_path / "membership.log"

    def state():
        return (job.supervisor.rounds, list(job.driver.sent), list(job.supervisor.stops),
                list(job.world.started), list(job.world.stopped), job.world.closed, run.done,
                log.read_text() if log.exists() else "")

    acted = {}
    for frame in received:
        before = state()
        run.on_frame(frame)
        acted[frame.KIND] = before != state()
    assert acted == {"HOSTS": False, "ALLOW": False, "EXITED": False, "ROUND": True,
                     "START": True, "STOP": True, "BLACKLIST": True, "RETRY": True,
                     "FATAL": True, "ALIVE": False, "DONE": True}
    assert job.driver.sent == [] and job.world.started == [(0, "node1")]
    assert job.world.envs["4"]["HOROVOD_RANK"] == "2" and job.world.stopped == [0]
    assert "node1 blacklisted for 12.5 s" in log.read_text()
    assert job.supervisor.stops == [
        "the elastic job cannot go on: fewer than --min-np 2 slots were usable",
        "the elastic job cannot go on: " + received[-1].reason]
    assert run.done == EXAMPLES[-1] and job.world.closed


def test_fixed_hosts_start_nothing_and_a_discovery_poller_is_started_and_watched(tmp_path,
                                                                                  monkeypatch):
    from popdist_launcher.launcher.elastic.discovery.poller import OK, Answer

    fixed = horovod_run(tmp_path / "fixed", monkeypatch)
    job = fixed.start([("hostA", 2), ("hostB", 2)])
    assert isinstance(job.poller, FixedHosts) and job.poller.read() == []
    assert job.supervisor.watched == [] and job.probes.refreshed
    assert (tmp_path / "fixed" / "membership.log").read_text().endswith(
        "elastic job (Horovod's driver, backend local): hosts hostA:2, hostB:2; -np 3, "
        "--min-np 2, --max-np 4\n")

    poller = FakePoller([Answer([("hostA", 2)], None, OK)])
    run = horovod_run(tmp_path / "script", monkeypatch, poller)
    job = run.start([("hostA", 2), ("hostB", 2)])
    assert poller.started and job.supervisor.watched == [(poller, run.on_poll)]
    job.supervisor.watched[0][1]()  # the script answered: hostB is gone
    assert (tmp_path / "script" / "membership.log").read_text().endswith(
        "hostB removed by the discovery script\n")
    run.close()
    assert poller.closed and job.driver.closed
