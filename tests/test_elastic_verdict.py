"""The verdict of a Horovod elastic job at its end (``launcher/elastic/horovod_rounds.py``):
the exit code and sentence from the rounds, the workers and the driver's results."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from popdist_launcher.launcher.supervision.attempt import Instance, JobResult, JobState
from popdist_launcher.launcher.elastic.horovod_rounds import Ending, Round, Worker, summary
from popdist_launcher.launcher.output.routing import OutputOptions, Router
from popdist_launcher.wire import helper_frames as frames

SUCCEEDED = JobResult(JobState.SUCCEEDED, 0, None, None)


def worker(wid: int, round_: int, host: str, local_rank: int, returncode: int,
           blame: str) -> Worker:
    w = Worker(frames.Start(wid=wid, round=round_, hostname=host, rank=0, size=4,
                            local_rank=local_rank, local_size=2, cross_rank=0, cross_size=2))
    w.inst = Instance(wid, host)
    w.inst.returncode = returncode
    w.how, w.code, w.blame = "exited", returncode, blame
    return w


def verdict(hosts: Sequence[Tuple[str, int]], ends: List[Tuple[str, int, int, str]],
            min_np: int) -> Tuple[int, str]:
    """``ends``: (host, local_rank, exit code, blame) of each worker of the last round."""
    workers: Dict[int, Worker] = {}
    results = {}
    for wid, (host, local_rank, code, blame) in enumerate(ends, 1):
        workers[wid] = worker(wid, 2, host, local_rank, code, blame)
        results[f"{host}[{local_rank}]"] = [code, 100.0 + wid]
    rounds = [Round(1, 2, [hosts[0]]), Round(2, sum(n for _, n in hosts), hosts)]
    router = Router(len(ends) + 1, OutputOptions())
    code, text = summary(rounds, workers, Ending(SUCCEEDED, None,
                                                 frames.Done(error=None, results=results), {},
                                                 min_np), router)
    return code, text.strip().splitlines()[-1].removeprefix("poprun-lite: ")


def test_every_worker_of_the_last_round_exited_0():
    code, text = verdict([("a", 2), ("b", 2)], [("a", 0, 0, "none"), ("a", 1, 0, "none"),
                                                ("b", 0, 0, "none"), ("b", 1, 0, "none")], 2)
    assert code == 0 and "job succeeded: every worker of round 2 exited 0" in text


def test_failures_of_a_host_the_others_carry_without_do_not_fail_a_job_that_succeeded():
    """The workers of a host that joined at the end fail as the others finish: the others carry
    --min-np, so in any other round the host would only have been blacklisted."""
    code, text = verdict([("a", 2), ("b", 2)], [("a", 0, 0, "none"), ("a", 1, 0, "none"),
                                                ("b", 0, 1, "slot"), ("b", 1, 1, "slot")], 2)
    assert code == 0, text
    assert "job succeeded: round 2's workers on a:2 exited 0" in text
    assert "b[0] exited with code 1; b[1] exited with code 1" in text
    assert "carry --min-np 2" in text


def test_failures_the_others_cannot_carry_fail_the_job_as_under_horovodrun():
    code, text = verdict([("a", 2), ("b", 2)], [("a", 0, 0, "none"), ("a", 1, 0, "none"),
                                                ("b", 0, 1, "slot"), ("b", 1, 0, "none")], 3)
    assert code == 1 and text.startswith("job failed: b[0] exited with 1"), text


def test_a_failure_on_the_only_host_fails_the_job():
    code, text = verdict([("a", 2)], [("a", 0, 0, "none"), ("a", 1, 3, "slot")], 1)
    assert code == 3 and text.startswith("job failed: a[1] exited with 3"), text


def test_workers_the_launcher_stopped_are_no_failure_of_a_job_that_succeeded():
    code, text = verdict([("a", 2), ("b", 2)], [("a", 0, 0, "none"), ("a", 1, 0, "none"),
                                                ("b", 0, 143, "none"), ("b", 1, 143, "none")], 4)
    assert code == 0 and "the launcher stopped those workers" in text, text


def test_failures_without_any_success_fail_the_job():
    code, text = verdict([("a", 1), ("b", 1)], [("a", 0, 2, "slot"), ("b", 0, 2, "slot")], 1)
    assert code == 2 and text.startswith("job failed:"), text
