"""Horovod 0.28's elastic integration scenarios (its test/integration/elastic_common.py) through
poprun-lite with horovodrun's options and Horovod's expected results, acted out by
workers/elastic_scenario.py on two hosts of this machine (localhost and 127.0.0.1, as Horovod's
tests use them); then faults: a discovery script that flaps, a host whose workers fail as they
start, SIGTERM during a reset. Every job: one line per
membership change, a final summary, no epoch trained twice, nothing left running.

Where Horovod's tests patch horovodrun (its driver polls discovery every 10 ms; one host is
enough to start), poprun-lite runs unpatched: the discovery script runs every second (the
worker waits up to 5 s, not Horovod's 3, for the notice of a scheduled host change) and a
round starts on whatever hosts offer -np slots (poprun-lite never waits for a second host).
"""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

from conftest import LAUNCHER, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("horovod_cycle_5ms")]

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).parent / "workers" / "elastic_scenario.py"
TWO_HOSTS = ["localhost:2", "127.0.0.1:2"]
MEMBERSHIP = re.compile(r"^poprun-lite: \[[0-9:.]+\] (.*)$", re.MULTILINE)


class Scenario:
    """One poprun-lite job of the scenario worker; ``records`` are rank 0's epoch lines."""

    def __init__(self, tmp: Path, options: Sequence[str], *, hosts=None, failures=None,
                 worker_args: Sequence[str] = ()) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.log = tmp / "epochs.jsonl"
        self.pids = tmp / "pids"
        self.pids.mkdir()
        self.output_dir = tmp / "logs"
        args = [str(WORKER), str(self.log), "--pid-dir", str(self.pids), *worker_args]
        if hosts is not None:
            args += ["--hosts", json.dumps(hosts)]
            script = tmp / "discover.sh"
            script.write_text(discovery_script(self.log, hosts))
            script.chmod(0o755)
            options = ["--host-discovery-script", str(script), *options]
        if failures:
            args += ["--failures", json.dumps(failures)]
        self.console = tmp / "console.txt"
        with open(self.console, "wb") as out:
            self.proc = subprocess.Popen(
                [*LAUNCHER, *options, "--output-dir", str(self.output_dir), sys.executable,
                 *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def finish(self, timeout: float = 240) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the job did not end:\n{self.text()[-5000:]}")
        text = self.text()
        # Nothing left running; every membership line is in membership.log, in order; one
        # summary.
        pids = [int(p.name) for p in self.pids.iterdir()]
        assert wait_gone(pids, timeout=10) == [], text[-3000:]
        logged = [line.split(" ", 1)[1] for line in
                  (self.output_dir / "membership.log").read_text().splitlines()]
        assert MEMBERSHIP.findall(text) == logged, text[-3000:]
        assert text.count("===== elastic job: ") == 1, text[-3000:]
        return text

    def records(self) -> List[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def started_on(self, host: str) -> int:
        return sum(1 for p in self.pids.iterdir() if p.read_text() == host)


def discovery_script(log: Path, schedule) -> str:
    """A script printing the hosts of ``schedule`` ([[epoch, hosts], ...], epoch None for every
    later one) for the number of epochs ``log`` holds."""
    cases = "".join(f"    {epoch}) printf '%s\\n' {' '.join(hosts)} ;;\n"
                    for epoch, hosts in schedule if epoch is not None)
    later = schedule[-1][1]
    return (f"#!/bin/sh\nn=$(cat {log} 2>/dev/null | wc -l)\ncase $n in\n{cases}"
            f"    *) printf '%s\\n' {' '.join(later)} ;;\nesac\n")


def elastic(np_: int = 2, min_np: int = 2, max_np: Optional[int] = 4, *extra: str) -> List[str]:
    return ["-np", str(np_), "--min-np", str(min_np),
            *(["--max-np", str(max_np)] if max_np else []), "--elastic-mode", "horovod",
            "--start-timeout", "120", *extra]


def fields(records: List[dict], *names: str) -> List[tuple]:
    return [tuple(r[n] for n in names) for r in records]


def check_epochs_once(records: List[dict], epochs: int) -> None:
    """Each epoch logged once, in order, with the commit count growing: nothing committed was
    lost and trained again."""
    assert [r["epoch"] for r in records] == list(range(epochs)), records
    commits = [r["commits"] for r in records]
    assert commits == sorted(set(commits)), records


# ---- Horovod's scenarios --------------------------------------------------------------------

def test_hosts_added_and_removed(tmp_path):
    # Horovod runs it with 2 slots per host and with 1; one slot keeps the test short.
    schedule = [[0, ["localhost:1"]], [1, ["localhost:1", "127.0.0.1:1"]],
                [None, ["127.0.0.1:1"]]]
    job = Scenario(tmp_path, elastic(1, 1, 2), hosts=schedule)
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 3)
    assert fields(records, "start_rank", "size", "host") == [
        (0, 1, "localhost"), (0, 2, "localhost"), (1, 1, "127.0.0.1")]
    assert records[2]["rendezvous"] == 3
    assert "127.0.0.1 added by the discovery script" in text
    assert "localhost removed by the discovery script" in text
    assert "blacklisted" not in text


def started_together(tmp_path_factory, **jobs) -> dict:
    """Scenario jobs started side by side for a module fixture: name -> the Scenario's
    keyword arguments (``options`` first); each test finishes its own."""
    return {name: Scenario(tmp_path_factory.mktemp(name), options, **kwargs)
            for name, (options, kwargs) in jobs.items()}


def end_all(jobs: dict) -> None:
    for job in jobs.values():
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


@pytest.fixture(scope="module")
def single_rank_failures(tmp_path_factory):
    """The two jobs of the test below, side by side."""
    failures = {"1,0": [0]}
    jobs = started_together(
        tmp_path_factory,
        **{"discovery-exception": (elastic(), dict(hosts=[[None, TWO_HOSTS]],
                                                   failures=failures)),
           "fixed-hosts-kill": (elastic(2, 2, None, "-H", ",".join(TWO_HOSTS)),
                                dict(failures=failures, worker_args=["--fail-by", "kill"]))})
    yield jobs
    end_all(jobs)


@pytest.mark.parametrize("how", ["discovery-exception", "fixed-hosts-kill"])
def test_single_rank_failure_and_fault_tolerance_without_scaling(single_rank_failures, how):
    """Horovod's test_single_rank_failure (discovery script) and
    test_fault_tolerance_without_scaling (-H), each run there with both exit modes: here one
    mode each."""
    job = single_rank_failures[how]
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 3)
    assert fields(records, "start_rank", "size", "rendezvous") == [(0, 4, 1), (2, 2, 2),
                                                                   (2, 2, 2)]
    assert "localhost blacklisted for the rest of the job" in text
    assert re.search(r"instance \d+ \(rank 0 of 4\) on localhost "
                     + ("exited with code 1" if how == "discovery-exception"
                        else "was killed by SIGKILL"), text)


def test_all_ranks_failure(tmp_path):
    job = Scenario(tmp_path, elastic(), hosts=[[None, TWO_HOSTS]],
                   failures={"1,0": [0, 1, 2, 3]})
    text = job.finish()
    assert job.proc.returncode == 1, text[-5000:]
    assert len(job.records()) == 1
    verdict = text[text.index("===== elastic job: "):]
    assert re.search(r"job failed: \S+\[\d\] exited with 1", verdict), verdict


def test_reset_limit(tmp_path):
    # The two jobs run side by side (each its own discovery script and log; the launcher's own
    # ports): 8 workers at once, so rank 0 waits up to 15 s for a host change's notice.
    schedule = [[0, ["localhost:2"]], [1, TWO_HOSTS], [None, ["127.0.0.1:2"]]]
    notice = ["--notice-wait", "15"]
    job = Scenario(tmp_path / "1", elastic(2, 2, 4, "--reset-limit", "1"), hosts=schedule,
                   worker_args=notice)
    second = Scenario(tmp_path / "2", elastic(2, 2, 4, "--reset-limit", "2"), hosts=schedule,
                      worker_args=notice)
    try:
        text = job.finish()
        assert job.proc.returncode != 0, text[-5000:]
        assert "number of resets during elastic job exceeded limit: 1" in text
        assert len(job.records()) == 2
    except BaseException:
        second.proc.kill()
        raise

    job = second
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_epochs_once(job.records(), 3)


def test_resurrecting_blacklisted_hosts_exponential_backoff(tmp_path):
    job = Scenario(tmp_path, elastic(2, 2, 4, "--blacklist-cooldown-range", "1", "2"),
                   hosts=[[None, TWO_HOSTS]], failures={"1,0": [3], "3,0": [3]},
                   worker_args=["--epochs", "5", "--epoch-wait", "0.25"])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 5)
    assert fields(records[:3], "start_rank", "size", "rendezvous") == [(0, 4, 1), (0, 2, 2),
                                                                       (0, 2, 2)]
    assert records[4]["start_rank"] == 0
    cooldowns = [float(c) for c in re.findall(r"127\.0\.0\.1 blacklisted for ([0-9.]+) s", text)]
    assert cooldowns and all(1 <= c <= 2 for c in cooldowns), text[-5000:]


# ---- faults ---------------------------------------------------------------------------------

def test_a_discovery_script_that_flaps(tmp_path):
    """127.0.0.1 leaves and comes back every second: each change is one line, and the job ends
    with every epoch trained once."""
    script = tmp_path / "flap.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n"
                      "[ $(( $(date +%s) % 2 )) -eq 0 ] && echo 127.0.0.1:2\nexit 0\n")
    script.chmod(0o755)
    job = Scenario(tmp_path, elastic(2, 2, 4, "--host-discovery-script", str(script)),
                   worker_args=["--epochs", "3", "--batches", "3", "--epoch-wait", "1"])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_epochs_once(job.records(), 3)
    # the live lines ("[HH:MM:SS.mmm] ..."), not the summary's copies of each round's events
    changes = re.findall(r"\] 127\.0\.0\.1 (added|removed) by the discovery script", text)
    assert len(changes) >= 2 and all(a != b for a, b in zip(changes, changes[1:])), changes
    assert "blacklisted" not in text and "job succeeded" in text


def test_a_host_that_joins_at_the_last_commit_and_fails_does_not_fail_the_finished_job(tmp_path):
    """127.0.0.1 is added as the last epoch ends: localhost's workers reset into a round with it
    at their last commit and, with nothing left to train, exit 0 while 127.0.0.1's workers fail
    as they begin. localhost carries --min-np, so in any other round 127.0.0.1 would only have
    been blacklisted: the job succeeds (horovodrun fails it on any non-zero exit in the last
    round), and the verdict names the failures."""
    job = Scenario(tmp_path, elastic(2, 2, 4),
                   hosts=[[0, ["localhost:2"]], [1, ["localhost:2"]], [None, TWO_HOSTS]],
                   worker_args=["--fail-at-start", "127.0.0.1", "--epochs", "2"])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    check_epochs_once(job.records(), 2)
    verdict = text[text.index("===== elastic job: "):]
    assert re.search(r"round 2 \(.*\): 4 instance\(s\) on localhost:2, 127\.0\.0\.1:2", verdict), \
        verdict
    assert re.search(r"job succeeded: round 2's workers on localhost:2 exited 0; its failures "
                     r"\(127\.0\.0\.1\[\d\] exited with code 1; 127\.0\.0\.1\[\d\] exited with "
                     r"code 1\) do not fail the job", verdict), verdict


def test_a_host_whose_workers_all_fail_at_start_is_blacklisted_with_its_cooldown(tmp_path):
    """127.0.0.1 joins after the first epoch and its workers fail as they begin to train, every
    time: it is blacklisted, and started again only after each cooldown, while localhost trains
    on. (Workers that die before hvd.init(): the test after this one.)"""
    job = Scenario(tmp_path, elastic(2, 2, 4, "--blacklist-cooldown-range", "1", "2"),
                   hosts=[[0, ["localhost:2"]], [None, TWO_HOSTS]],
                   worker_args=["--fail-at-start", "127.0.0.1", "--epochs", "4",
                                "--epoch-wait", "1.5"])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 4)
    # Only localhost trains. (A line's "size" may be 4: when 127.0.0.1 comes back at the
    # epoch's last commit, rank 0 writes the line in the new round, before any step in it.)
    assert {(r["host"], r["step_size"]) for r in records} == {("localhost", 2)}
    stamped = [(_seconds(t), line) for t, line in
               re.findall(r"^poprun-lite: \[([0-9:.]+)\] (.*)$", text, re.MULTILINE)]
    out = [(t, float(m.group(1))) for t, line in stamped
           if (m := re.match(r"127\.0\.0\.1 blacklisted for ([0-9.]+) s", line))]
    back = [t for t, line in stamped if re.match(r"round \d+: 4 instance", line)]
    assert out and all(1 <= cooldown <= 2 for _, cooldown in out), text[-5000:]
    # Each start on 127.0.0.1 after the first comes after the cooldown of the blacklist before.
    for t_back in back[1:]:
        t_out, cooldown = max(o for o in out if o[0] < t_back)
        assert t_back >= t_out + cooldown - 0.05, (t_out, cooldown, t_back)
    assert job.started_on("127.0.0.1") == 2 * len(back)


@pytest.fixture(scope="module")
def dying_new_hosts(tmp_path_factory):
    """The two jobs of the test below, side by side (rank 0 waits up to 15 s for the notice
    of the host change)."""
    jobs = started_together(tmp_path_factory, **{
        how.strip("-"): (elastic(2, 2, 4, "--blacklist-cooldown-range", "600", "900"),
                         dict(hosts=[[0, ["localhost:2"]], [None, TWO_HOSTS]],
                              worker_args=[how, "127.0.0.1", "--notice-wait", "15"]))
        for how in ("--fail-before-init", "--fail-at-import")})
    yield jobs
    end_all(jobs)


@pytest.mark.parametrize("how", ["--fail-before-init", "--fail-at-import"])
def test_a_new_host_whose_workers_die_before_hvd_init_is_blacklisted_and_survivors_go_on(
        dying_new_hosts, how):
    """127.0.0.1 is added after the first epoch and its workers end before hvd.init() (after
    importing Horovod, or at once with an ImportError while localhost's workers are in their
    reset): localhost's workers were held in their rank_and_size request until the new workers
    reached Gloo's rendezvous, so they never wait there for a rank that cannot come (Horovod
    would abort them at HOROVOD_GLOO_TIMEOUT_SECONDS with the committed state); 127.0.0.1 is
    blacklisted and the round forms again without it. The same two workers train every epoch
    once, from the state they committed."""
    job = dying_new_hosts[how.strip("-")]
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 3)
    # localhost's workers were never started again: one pid for rank 0 throughout, two
    # workers in all, and one reset (the round that added 127.0.0.1) in the state they synced
    assert job.started_on("localhost") == 2, text[-5000:]
    assert len({r["pid"] for r in records}) == 1, records
    assert fields(records, "host", "start_rank", "size", "rendezvous") == [
        ("localhost", 0, 2, 1), ("localhost", 0, 2, 2), ("localhost", 0, 2, 2)]
    # (a worker stopped as its peer failed may not have written its pid yet)
    assert 1 <= job.started_on("127.0.0.1") <= 2, text[-5000:]
    assert re.search(r"\] 127\.0\.0\.1 blacklisted for [0-9.]+ s", text), text[-5000:]
    assert re.search(r"\] round 2: 4 instance\(s\) on localhost:2, 127\.0\.0\.1:2", text), \
        text[-5000:]
    assert re.search(r"\] round 3: 2 instance\(s\) on localhost:2 \(was 4", text), text[-5000:]
    code = 3 if how == "--fail-before-init" else 1
    assert len(re.findall(rf"\] instance \d+ \(rank [23] of 4\) on 127\.0\.0\.1 exited with "
                          rf"code {code}", text)) >= 1, text[-5000:]
    assert "SIGABRT" not in text and "Gloo" not in text, text[-5000:]
    assert "job succeeded" in text


def test_a_broken_new_host_beside_a_good_new_worker_the_round_forms_again_with_the_good_one(
        tmp_path):
    """localhost:1 trains; after the first epoch localhost gets a second slot and 127.0.0.1:2
    is added, whose workers exit before hvd.init(). The round of 4 forms again without
    127.0.0.1: localhost's new worker (stopped: its rank was about to change) is started again
    in it, gets the state from the survivor and the two train the last epochs."""
    job = Scenario(tmp_path, elastic(1, 1, 4, "--blacklist-cooldown-range", "600", "900"),
                   hosts=[[0, ["localhost:1"]], [None, ["localhost:2", "127.0.0.1:2"]]],
                   worker_args=["--fail-before-init", "127.0.0.1"])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 3)
    assert len({r["pid"] for r in records}) == 1, records  # rank 0 was never started again
    assert fields(records, "host", "start_rank", "size", "rendezvous") == [
        ("localhost", 0, 1, 1), ("localhost", 0, 2, 2), ("localhost", 0, 2, 2)]
    assert re.search(r"\] round 2: 4 instance\(s\) on localhost:2, 127\.0\.0\.1:2", text), \
        text[-5000:]
    assert re.search(r"\] 127\.0\.0\.1 blacklisted for [0-9.]+ s", text), text[-5000:]
    assert re.search(r"\] round 3: 2 instance\(s\) on localhost:2 \(was 4", text), text[-5000:]
    verdict = text[text.index("===== elastic job: "):]
    assert re.search(r"round 3 \(.*\): 2 instance\(s\) on localhost:2; instances started: \d+",
                     verdict), verdict
    assert "SIGABRT" not in text and "job succeeded" in text, text[-5000:]


def _seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def test_a_worker_killed_during_the_state_sync(tmp_path):
    """localhost's rank 0 fails, so 127.0.0.1 carries on alone (--min-np 1); as its second sync
    begins, its worker of start rank 3 is killed while start rank 2 is in the broadcast: 127.0.0.1
    is the only host left, so the slot is started again in place, and rank 0 stays the worker
    holding the last commit."""
    job = Scenario(tmp_path, elastic(4, 1, None, "-H", ",".join(TWO_HOSTS)),
                   failures={"1,0": [0]}, worker_args=["--sync-failures", '{"2": [3]}'])
    text = job.finish()
    assert job.proc.returncode == 0, text[-5000:]
    records = job.records()
    check_epochs_once(records, 3)
    assert fields(records, "start_rank", "size") == [(0, 4), (2, 2), (2, 2)]
    assert "localhost blacklisted for the rest of the job" in text
    # (the rank it started with: 3 of 4)
    assert re.search(r"instance \d+ \(rank 3 of 4\) on 127\.0\.0\.1 was killed by SIGKILL",
                     text), text[-5000:]
    assert re.search(r"on 127\.0\.0\.1 was killed by SIGKILL; restarting in place \(failure 1 "
                     r"of --host-failure-limit 3, counted again from 1 after progress\): "
                     r"instance \d+'s slot "
                     r"is started again \(the other hosts cannot carry --min-np 1\)", text), \
        text[-5000:]


def test_sigterm_during_a_reset_stops_every_worker(tmp_path):
    job = Scenario(tmp_path, elastic(4, 2, None, "-H", ",".join(TWO_HOSTS)),
                   failures={"1,0": [0]}, worker_args=["--epoch-wait", "1"])
    deadline = time.monotonic() + 240
    while "round 2:" not in job.text():
        assert job.proc.poll() is None and time.monotonic() < deadline, job.text()[-5000:]
        time.sleep(0.02)
    job.proc.send_signal(signal.SIGTERM)
    text = job.finish()
    assert job.proc.returncode == 128 + signal.SIGTERM, text[-5000:]
    assert "job interrupted (SIGTERM)." in text
    assert [r["epoch"] for r in job.records()] == [0]
