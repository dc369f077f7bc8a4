"""The failure policy of both elastic modes (popdist_launcher/launcher/elastic/failure_policy.py),
without a process: a fake list of monitor results (which host failed, the job's progress mark then)
is played through it, as torch's SimpleElasticAgentTest plays fake worker-group results through its
agent, and every decision is checked."""
from typing import List, Sequence, Tuple

import pytest

from popdist_launcher.launcher.elastic import failure_policy as policy

BLACKLIST, RESTART, END = policy.BLACKLIST, policy.RESTART, policy.END


def play(results: Sequence[Tuple[str, int]], hosts, min_np: int, limit: int,
         host_failed: bool = False) -> List[policy.Decision]:
    """Each (failed host, progress mark) in turn, with the blacklist the decisions build."""
    streaks = policy.FailureStreaks(limit)
    out, decisions = set(), []
    for host, mark in results:
        decision = policy.decide(policy.Fault(host, f"instance on {host} exited with 1",
                                              host_failed), hosts, min_np, streaks, mark, out)
        if decision.action == BLACKLIST:
            out.add(host)
        decisions.append(decision)
    return decisions


def actions(decisions):
    return [(d.action, d.streak) for d in decisions]


def test_two_hosts_min_np_2_restarts_in_place_then_ends_at_the_limit():
    # A:1, B:1, --min-np 2: B alone cannot carry the job, so blacklisting A would only wait
    # out --elastic-timeout: both modes restart A in place, bounded by --host-failure-limit.
    decisions = play([("A", 0), ("A", 0), ("A", 0)], [("A", 1), ("B", 1)], 2, 3)
    assert actions(decisions) == [(RESTART, 1), (RESTART, 2), (END, 3)]
    assert decisions[0].sentence == ("instance on A exited with 1; restarting in place "
                                     "(failure 1 of "
                                     "--host-failure-limit 3, counted again from 1 after progress)")
    assert decisions[2].sentence == (
        "instance on A exited with 1, the 3rd failure of A in a row without progress "
        "(--host-failure-limit 3), and the other hosts cannot carry --min-np 2 (1 usable slot(s) "
        "without A).")


def test_other_hosts_that_carry_min_np_get_the_failed_host_blacklisted():
    decisions = play([("A", 0)], [("A", 2), ("B", 2)], 2, 3)
    assert actions(decisions) == [(BLACKLIST, 1)]
    assert not decisions[0].forever
    assert decisions[0].sentence == "instance on A exited with 1; A blacklisted"


def test_the_only_host_left_restarts_in_place_once_the_others_are_blacklisted():
    # B blacklisted first (A carries --min-np 1); then A fails: nothing else can carry it.
    decisions = play([("B", 0), ("A", 0), ("A", 0)], [("A", 1), ("B", 1)], 1, 2)
    assert actions(decisions) == [(BLACKLIST, 1), (RESTART, 1), (END, 2)]


def test_progress_since_the_hosts_last_failure_starts_its_streak_again():
    decisions = play([("A", 5), ("A", 5), ("A", 9), ("A", 9), ("A", 9)], [("A", 1)], 1, 3)
    assert actions(decisions) == [(RESTART, 1), (RESTART, 2), (RESTART, 1), (RESTART, 2),
                                  (END, 3)]


def test_a_failure_that_repeats_slowly_without_progress_ends_whatever_the_time():
    # The mark (steps, checkpoints, commits) never grows: wall time between failures does not
    # matter, the policy has no clock.
    decisions = play([("solo", 7)] * 4, [("solo", 4)], 4, 4)
    assert [d.action for d in decisions] == [RESTART, RESTART, RESTART, END]
    assert "the 4th failure of solo" in decisions[-1].sentence


def test_a_host_that_failed_itself_is_blacklisted_even_when_the_others_cannot_carry():
    decisions = play([("A", 0)], [("A", 1), ("B", 1)], 2, 3, host_failed=True)
    assert actions(decisions) == [(BLACKLIST, 1)]


def test_a_host_at_the_limit_is_blacklisted_for_the_rest_of_the_job():
    # With a cooldown it would come back into the same failure for ever: at the limit it
    # stays out (both modes ask for forever).
    streaks = policy.FailureStreaks(2)
    hosts = [("A", 1), ("B", 1)]
    first = policy.decide(policy.Fault("A", "lost", True), hosts, 1, streaks, 3)
    second = policy.decide(policy.Fault("A", "lost", True), hosts, 1, streaks, 3)
    assert (first.forever, second.forever) == (False, True)
    assert "A blacklisted for the rest of the job (failure 2 of --host-failure-limit 2 with no " \
        "progress between them" in second.sentence


def test_a_failure_no_host_is_blamed_for_restarts_the_job_and_ends_at_the_limit():
    streaks = policy.FailureStreaks(2)
    first = policy.decide(policy.Fault(policy.JOB, "ssh ended"), [], 1, streaks, 0)
    second = policy.decide(policy.Fault(policy.JOB, "ssh ended"), [], 1, streaks, 0)
    assert (first.action, second.action) == (RESTART, END)
    assert "no host is blamed" in second.sentence


def test_streaks_are_per_host():
    streaks = policy.FailureStreaks(2)
    hosts = [("A", 1), ("B", 1)]
    a = policy.decide(policy.Fault("A", "x"), hosts, 2, streaks, 0)
    b = policy.decide(policy.Fault("B", "x"), hosts, 2, streaks, 0)
    assert (a.streak, b.streak) == (1, 1) and streaks.count("A") == 1


@pytest.mark.parametrize("n, text", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"),
                                     (11, "11th"), (12, "12th"), (13, "13th"), (21, "21st"),
                                     (22, "22nd"), (111, "111th")])
def test_ordinals(n, text):
    assert policy.ordinal(n) == text
