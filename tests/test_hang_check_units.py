"""The hang check's parts below its decision, without a process: the bounds and the clock that
learns them and what the instances' environment gets (launcher/supervision/hang/bounds.py),
the evidence the launcher keeps per instance (launcher/supervision/hang/evidence.py: the
sampler's reports, Horovod's "Missing ranks" lines, ``Track``), and ``HangCheck``
(launcher/supervision/hang/check.py) fed by hand, at
explicit times, through a fake ``Port`` around real ``attempt.Instance`` objects: what it probes,
what it cuts and with which words, whose stacks it collects, and a watchdog's stall."""
import pytest

from popdist_launcher.launcher.output import report
from popdist_launcher.launcher.supervision.attempt import Failure, Instance, InstanceState
from popdist_launcher.launcher.supervision.hang import Bounds, Clock, HangCheck, environment
from popdist_launcher.launcher.supervision.hang.bounds import (HOROVOD_STALL_ENV, LEARN_WINDOW_S,
                                                               WHEREABOUTS_ENV, stall_check_s)
from popdist_launcher.launcher.supervision.hang.decision import Hung, Verdict
from popdist_launcher.launcher.supervision.hang.evidence import (UNKNOWN, MissingRanks, Position,
                                                                 Report, Seen, Track, parse_report,
                                                                 position_of)
from popdist_launcher.wire import position_report


# ---- bounds.Clock -------------------------------------------------------------------------------


def test_a_given_timeout_is_the_short_and_wait_bound_and_at_most_raises_the_long_one():
    assert Clock(5.0).bounds() == Bounds(5.0, 5.0, 600.0)
    assert Clock(700.0).bounds() == Bounds(700.0, 700.0, 700.0)
    assert Clock(5.0, busy_timeout=20.0).bounds() == Bounds(5.0, 5.0, 20.0)
    assert Clock(50.0, busy_timeout=20.0).bounds() == Bounds(50.0, 50.0, 50.0)


def test_a_given_timeout_is_used_as_it_is_whatever_the_jobs_intervals():
    clock = Clock(5.0)
    clock.event(0.0)
    clock.event(1000.0)
    assert clock.learned() == 5000.0
    assert clock.bounds() == Bounds(5.0, 5.0, 600.0)


def test_the_default_bounds_are_the_floors():
    assert Clock(None).bounds() == Bounds(30.0, 180.0, 600.0)
    assert Clock(None, busy_timeout=900.0).bounds() == Bounds(30.0, 180.0, 900.0)


def test_learned_bounds_are_five_times_the_longest_interval_between_events():
    clock = Clock(None)
    clock.event(100.0)
    assert clock.learned() == 0.0 and clock.bounds() == Bounds(30.0, 180.0, 600.0)
    clock.event(101.0)
    clock.event(121.0)  # 20 s
    clock.event(125.0)
    assert clock.learned() == 100.0
    assert clock.bounds() == Bounds(100.0, 180.0, 600.0)
    clock.event(325.0)  # 200 s
    assert clock.bounds() == Bounds(1000.0, 1000.0, 1000.0)
    assert Clock(None, busy_timeout=2000.0).bounds().long == 2000.0


def test_learned_intervals_older_than_the_window_are_forgotten():
    clock = Clock(None)
    clock.event(0.0)
    clock.event(200.0)  # 200 s, ended at 200
    t = 200.0
    while t < 200.0 + LEARN_WINDOW_S:
        t += 10.0
        clock.event(t)
    assert clock.learned() == 1000.0  # ended exactly LEARN_WINDOW_S ago: still in
    clock.event(t + 10.0)
    assert clock.learned() == 50.0


def test_a_restart_does_not_count_the_gap_before_it_nor_its_start_up():
    clock = Clock(None)
    clock.event(0.0)
    clock.event(10.0)
    clock.restart(100.0)  # 90 s after the last event: no interval
    clock.event(101.0)
    assert clock.learned() == 50.0 and clock.last == 101.0
    clock.restart(200.0)
    clock.event(260.0, under_way=False)  # 60 s of start-up: no interval
    clock.event(300.0, under_way=False)
    clock.event(301.0)  # under way
    assert clock.learned() == 50.0 and clock.last == 301.0
    clock.event(321.0)
    assert clock.learned() == 100.0


def test_the_first_event_of_a_job_starts_the_clock_whether_or_not_under_way():
    clock = Clock(None)
    clock.event(0.0, under_way=False)
    clock.event(40.0, under_way=False)
    assert clock.learned() == 0.0 and not clock.under_way
    clock.event(45.0)
    clock.event(50.0)
    assert clock.learned() == 25.0


def test_timeout_zero_turns_the_check_off():
    assert Clock(0.0).on is False and Clock(0).on is False
    assert Clock(None).on is True and Clock(5.0).on is True


# ---- bounds.environment / stall_check_s ----------------------------------------------------------

def test_stall_check_interval_comes_three_times_within_the_wait_bound():
    assert stall_check_s(None) == 60  # 180 / 3, Horovod's own default
    assert stall_check_s(0) == 60
    assert stall_check_s(9.0) == 3
    assert stall_check_s(90.0) == 30
    assert stall_check_s(1.0) == 1
    assert stall_check_s(1000.0) == 60


def test_environment_turns_the_sampler_off_with_the_check():
    assert environment(0, {}) == ((WHEREABOUTS_ENV, "0"),)
    assert environment(0.0, {HOROVOD_STALL_ENV: "5"}) == (("POPRUN_WHEREABOUTS", "0"),)


def test_environment_sets_horovods_stall_check_for_a_short_timeout():
    assert environment(9.0, {}) == (("HOROVOD_STALL_CHECK_TIME_SECONDS", "3"),)
    assert environment(1.0, {"PATH": "/bin"}) == ((HOROVOD_STALL_ENV, "1"),)


def test_the_users_stall_check_wins():
    assert environment(9.0, {HOROVOD_STALL_ENV: "100"}) == ()
    assert environment(9.0, {}, [(HOROVOD_STALL_ENV, "7")]) == ()
    assert environment(9.0, {}, [("OTHER", "7")]) == ((HOROVOD_STALL_ENV, "3"),)


def test_the_default_bound_needs_nothing_since_60_s_is_horovods_default():
    assert environment(None, {}) == ()
    assert environment(500.0, {}) == ()


# ---- evidence: the sampler's reports ------------------------------------------------------------

@pytest.mark.parametrize("activity", position_report.ACTIVITIES)
@pytest.mark.parametrize("where, position", [
    ("program", Position("program")),
    ("import", Position("import")),
    ("tensorflow", Position("tensorflow")),
    ("computing", Position("computing")),
    ("exit", Position("exit")),
    ("collective allreduce", Position("collective", "allreduce")),
    ("collective sync > broadcast_object > broadcast",
     Position("collective", "sync > broadcast_object > broadcast")),
    ("long Keras ModelCheckpoint save", Position("long", "Keras ModelCheckpoint save")),
])
def test_parse_report_reads_what_the_sampler_encodes(activity, where, position):
    detail = "main thread in gen at prog.py:41"
    payload = position_report.encode(7, 2, activity, where, detail)
    assert parse_report(payload) == Report(7, 2, activity, position, detail)
    assert parse_report(payload + b"\n") == Report(7, 2, activity, position, detail)


def test_every_kind_of_position_the_sampler_sends_is_read_and_described():
    from popdist_launcher import whereabouts
    sent = {kind for kind in whereabouts.RANK} | {"computing", "long", "exit"}
    assert sent == set(position_report.KINDS)
    for kind in position_report.KINDS:
        assert Position(kind, "x").describe() != "an unknown place", kind


def test_the_stack_pipe_is_spelled_once_for_the_program_and_the_wrapper():
    from popdist_launcher import stack_dump, whereabouts
    from popdist_launcher.wire import protocol, stack_pipe
    assert (protocol.STACK_FD_ENV, protocol.STACK_READY, protocol.STACK_STALL,
            protocol.STACK_PROGRESS, protocol.STACK_WHERE) == \
        (stack_dump.ENV, stack_dump.READY, stack_dump.STALL, stack_dump.PROGRESS,
         whereabouts.WHERE) == \
        (stack_pipe.FD_ENV, stack_pipe.READY, stack_pipe.STALL, stack_pipe.PROGRESS,
         stack_pipe.WHERE)
    assert WHEREABOUTS_ENV == stack_dump.WHEREABOUTS_ENV == stack_pipe.WHEREABOUTS_ENV
    # each marker starts with a NUL (faulthandler's text never holds one) and none is the start
    # of another: the wrapper tells them apart by their first bytes
    for marker in stack_pipe.MARKERS:
        assert marker.startswith(b"\0") and b"\n" not in marker.rstrip(b"\n")
        assert not any(other != marker and other.startswith(marker)
                       for other in stack_pipe.MARKERS)
    assert b"\n" not in position_report.encode(1, 2, "busy", "program", "a\nb")


def test_parse_report_of_a_place_it_does_not_know_or_without_detail():
    assert parse_report(position_report.encode(0, -1, "waiting", "nowhere", "")) == \
        Report(0, -1, "waiting", UNKNOWN, "")
    assert parse_report(b"3 1 busy program") == Report(3, 1, "busy", Position("program"), "")


@pytest.mark.parametrize("payload", [b"", b"\n", b"x 1 busy program\t", b"1 x busy program\t",
                                     b"1 2 napping program\t", b"\xff\xfe 1 busy program",
                                     b"1 2", b"collective allreduce"])
def test_a_bad_payload_is_no_report(payload):
    assert parse_report(payload) is None


def test_position_of_and_describe():
    assert position_of("collective sync > broadcast") == Position("collective",
                                                                  "sync > broadcast")
    assert position_of("") == UNKNOWN and position_of("elsewhere x") == UNKNOWN
    words = {Position("collective", "allreduce"): "collective allreduce",
             Position("tensorflow"): "a TensorFlow step, not computing (a graph collective)",
             Position("computing"): "a TensorFlow step, computing",
             Position("long", "eval"): "long phase 'eval'",
             Position("program"): "its own code, outside any collective",
             Position("exit"): "interpreter exit, waiting for a thread",
             UNKNOWN: "an unknown place"}
    assert {p: p.describe() for p in words} == words


# ---- evidence: Horovod's "Missing ranks" ---------------------------------------------------------

STALL = (b"[2026-01-01 10:00:00.000000: W /tmp/horovod/common/stall_inspector.cc:105] One or "
         b"more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
         b"and are waiting for remainder of ranks for more than 60 seconds. This may indicate "
         b"that different ranks are trying to submit different tensors or that only subset of "
         b"ranks is submitting tensors, which will cause deadlock. \nMissing ranks:\n"
         b"1: [DistributedGradientTape_Allreduce/cond/HorovodAllreduce_grads_0]\n"
         b"0: [clipped_grad]\n\nnext line\n")
FOUND = [(1, "DistributedGradientTape_Allreduce/cond/HorovodAllreduce_grads_0"),
         (0, "clipped_grad")]


def test_missing_ranks_in_one_piece():
    assert MissingRanks().feed(0, STALL) == FOUND


def test_missing_ranks_split_anywhere():
    for cut in range(len(STALL) + 1):
        missing = MissingRanks()
        assert missing.feed(3, STALL[:cut]) + missing.feed(3, STALL[cut:]) == FOUND, cut
    for first in range(0, len(STALL), 37):
        for second in range(first, len(STALL), 53):
            missing = MissingRanks()
            parts = (STALL[:first], STALL[first:second], STALL[second:])
            assert [f for part in parts for f in missing.feed(3, part)] == FOUND


def test_missing_ranks_byte_by_byte_and_found_when_their_line_ends():
    missing = MissingRanks()
    found = [(i, f) for i in range(len(STALL)) for f in missing.feed(0, STALL[i:i + 1])]
    first = STALL.index(b"grads_0]\n") + len(b"grads_0]")
    assert found == [(first, FOUND[0]), (STALL.index(b"clipped_grad]\n") + 13, FOUND[1])]


def test_missing_ranks_per_instance_and_only_right_after_the_header():
    missing = MissingRanks()
    half = STALL.index(b"1: [")
    assert missing.feed(0, STALL[:half]) == []
    assert missing.feed(1, b"2: [not after a header]\nMissing ranks:\r\n") == []
    assert missing.feed(0, STALL[half:]) == FOUND
    assert missing.feed(1, b"4: [a, b]\r\nother\n5: [too late]\n") == [(4, "a, b")]
    assert missing.feed(0, b"7: [after the block ended]\n") == []


# ---- evidence: Track -----------------------------------------------------------------------------

def where(left=0, rank=1, activity="busy", position=Position("program"), detail=""):
    return Report(left, rank, activity, position, detail)


def test_track_times_its_position_and_activity_apart():
    track = Track(0.0)
    assert track.update(where(), 5.0) == (True, False)  # the first report moves it
    assert (track.position_at, track.activity_at) == (5.0, 5.0)
    assert track.update(where(activity="blocked"), 8.0) == (False, False)
    assert (track.position_at, track.activity_at) == (5.0, 8.0)
    coll = Position("collective", "allreduce")
    assert track.update(where(activity="blocked", position=coll), 10.0) == (True, False)
    assert (track.position_at, track.activity_at) == (10.0, 8.0)
    assert track.update(where(activity="blocked", position=coll, detail="x"), 12.0) == \
        (False, False)
    assert (track.position_at, track.activity_at) == (10.0, 8.0)
    assert track.seen(20.0, 10.0) == Seen(coll, "blocked", "x", 10.0, 12.0, "", 20.0, "", 1)


def test_leaving_a_wait_or_moving_clears_horovods_word_and_nothing_else_does():
    track = Track(0.0)
    track.update(where(position=Position("tensorflow"), activity="waiting"), 1.0)
    track.missing, track.missing_at = "'grads_0'", 2.0
    track.update(where(position=Position("tensorflow"), activity="busy"), 3.0)
    assert track.missing == "'grads_0'" and track.missing_at == 2.0
    assert track.update(where(left=1, position=Position("tensorflow")), 4.0) == (False, True)
    assert (track.missing, track.missing_at) == ("", None)
    assert track.position_at == 1.0  # the same position: not reset
    track.missing, track.missing_at = "'x'", 5.0
    track.update(where(left=1, position=Position("program")), 6.0)
    assert (track.missing, track.missing_at) == ("", None)


def test_horovods_word_holds_for_missing_for_seconds():
    track = Track(0.0)
    track.update(where(position=Position("tensorflow"), activity="waiting"), 1.0)
    track.missing, track.missing_at = "'g'", 10.0
    assert track.seen(24.0, 14.0).missing == "'g'"
    assert track.seen(24.5, 14.0).missing == ""


def test_track_probes_and_a_track_without_reports():
    track = Track(0.0)
    track.probed("T", 5.0)
    track.probed("T", 10.0)  # the same state: it has been so since the first probe found it
    assert (track.state, track.state_at) == ("T", 5.0)
    assert track.seen(17.0, 1.0) == Seen(state="T", state_s=12.0)
    track.probed("S", 18.0)
    assert (track.state, track.state_at) == ("S", 18.0)


def test_an_uninterruptible_wait_that_works_between_probes_is_io_not_stopped():
    track = Track(0.0)
    track.probed("D 100\n", 5.0)
    track.probed("D 4196", 10.0)  # it wrote 4 kB since: I/O under way, its time starts again
    track.probed("D 9000", 15.0)
    assert (track.state, track.state_at) == ("D", 15.0)
    track.probed("D 9000", 20.0)  # no work since the last probe: still in D since 15
    track.probed("D 9000", 25.0)
    assert (track.state, track.state_at) == ("D", 15.0)
    stopped = Track(0.0)
    stopped.probed("T 5", 5.0)
    stopped.probed("T 6", 10.0)  # a stopped process is stopped whatever its counters say
    assert (stopped.state, stopped.state_at) == ("T", 5.0)
    unknown = Track(0.0)
    unknown.probed("D -1", 5.0)  # counters that cannot be read: the state alone decides
    unknown.probed("D -1", 10.0)
    assert (unknown.state, unknown.state_at) == ("D", 5.0)


def test_the_wrappers_probe_reads_the_main_threads_state_and_work(tmp_path):
    import os
    import subprocess
    import sys
    import time
    from popdist_launcher.launcher.spawned.wrapper import program_state
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        f"with open({str(tmp_path / 'out')!r}, 'w') as f:\n"
        "    while True:\n"
        "        f.write('x' * 65536); f.flush(); time.sleep(0.01)\n")])
    try:
        time.sleep(0.5)
        first = program_state(writer.pid)
        time.sleep(0.5)
        second = program_state(writer.pid)
        state, work = first.split()
        assert state in "RSD" and int(second.split()[1]) > int(work) >= 0, (first, second)
        os.kill(writer.pid, 19)  # SIGSTOP
        time.sleep(0.2)
        assert program_state(writer.pid).split()[0] == "T"
    finally:
        writer.kill()
        writer.wait()
    assert program_state(writer.pid) == "?"


# ---- HangCheck through a fake Port ------------------------------------------------------------

class FakePort:
    """The supervisor as the check sees it: the running instances and a record of requests."""

    def __init__(self, instances, collects=True):
        self.instances = instances
        self.collects = collects  # False: a collection runs already
        self.probes, self.cuts, self.collections = [], [], []
        self.stacks = {}

    def running(self):
        return [i for i in self.instances if i.conn is not None and i.pid is not None
                and not i.settled and not i.stopped]

    def probe(self, inst):
        self.probes.append(inst.index)

    def collect_stacks(self, insts, reason, then, keep=None, after=None):
        self.collections.append((insts, reason, then, keep, after))
        return self.collects

    def stacks_of(self, index):
        return self.stacks.get(index, "")

    def cut(self, inst):
        self.cuts.append(inst)

    def instance(self, index):
        return self.instances[index]


def instances(n, evaluator=False):
    made = []
    for index in range(n + (1 if evaluator else 0)):
        inst = Instance(index, f"host{index}", "evaluator" if index == n else "")
        inst.pid, inst.conn = 1000 + index, object()
        inst.to(InstanceState.CONNECTED)
        inst.to(InstanceState.RUNNING)
        made.append(inst)
    return made


def ended(inst):
    inst.returncode = 0
    inst.to(InstanceState.EXITED)


def job(n, timeout=10.0, busy_timeout=None, evaluator=False, collects=True):
    """n instances started at 0 and their check."""
    insts = instances(n, evaluator)
    port = FakePort(insts, collects)
    check = HangCheck(port, timeout, busy_timeout)
    for inst in insts:
        check.started(inst, 0.0)
    return port, check, insts


def ticks(check, first, last):
    for t in range(first, last + 1):
        check.tick(float(t))


def report_at(check, inst, now, activity, where, detail="", left=0, rank=None):
    check.where(inst, position_report.encode(left, inst.index if rank is None else rank, activity,
                                         where, detail), now)


READ = "main thread in read at prog.py:7"


def test_probes_every_5_s_and_ticks_every_second():
    port, check, insts = job(2)
    assert check.deadline() == 1.0
    check.tick(0.5)  # before its time: nothing
    assert check.deadline() == 1.0 and port.probes == []
    probed_at = []
    for t in range(1, 21):
        before = len(port.probes)
        check.tick(float(t))
        assert check.deadline() == t + 1.0
        if len(port.probes) > before:
            probed_at.append((t, port.probes[before:]))
    assert probed_at == [(5, [0, 1]), (10, [0, 1]), (15, [0, 1]), (20, [0, 1])]
    assert port.cuts == [] and port.collections == []


def test_no_deadline_before_a_start_or_when_the_timeout_is_zero():
    port = FakePort(instances(2))
    assert HangCheck(port, 10.0).deadline() is None
    port, check, insts = job(2, timeout=0.0)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    check.probed(insts[1], b"T", 1.0)
    assert check.deadline() is None
    ticks(check, 1, 2000)
    assert port.probes == [] and port.cuts == [] and port.collections == []
    assert all(not i.hung for i in insts)


def test_a_blocked_instance_is_named_its_stacks_collected_then_cut(capsys):
    port, check, insts = job(3)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[2], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    ticks(check, 1, 10)
    assert port.collections == [] and insts[1].hung == ""
    check.tick(11.0)
    assert insts[1].hung == (
        "was hung (blocked): no CPU and no I/O for 10 s in its own code, outside any collective; "
        f"{READ}; its peers waited (instances 0, 2 in collective allreduce); rank 1, pid 1001; "
        "bound 10 s (--hang-timeout)")
    assert [(c[0], c[1], c[2], c[3]) for c in port.collections] == \
        [([insts[1]], "hang check", "hang", None)]
    assert port.cuts == []  # not before its stacks are in
    ticks(check, 12, 30)  # already named: not again
    assert len(port.collections) == 1 and port.cuts == []
    port.stacks[1] = "Thread 0x1 (most recent call first):\n  File prog.py, line 7\n"
    port.collections[0][4]()  # the stacks came in
    assert port.cuts == [insts[1]]
    err = capsys.readouterr().err
    assert ("poprun-lite: hang check: the Python stacks of instance 1 (host host1, pid 1001), "
            "which is hung:\n    Thread 0x1 (most recent call first):\n"
            "      File prog.py, line 7\n") in err
    ticks(check, 31, 60)
    assert port.cuts == [insts[1]] and len(port.collections) == 1
    assert insts[0].hung == "" and insts[2].hung == ""


def test_while_a_collection_runs_already_the_hung_one_is_cut_at_once():
    port, check, insts = job(2, collects=False)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    ticks(check, 1, 11)
    assert len(port.collections) == 1 and port.cuts == [insts[1]]
    ticks(check, 12, 40)  # the world has not killed it yet: still running, not cut again
    assert port.cuts == [insts[1]] and len(port.collections) == 1


def test_an_instance_already_hung_or_ended_is_not_cut():
    port, check, insts = job(2)
    seen = {0: Seen(), 1: Seen()}
    verdict = Verdict((Hung(0, "busy", 700.0, "x"), Hung(1, "busy", 700.0, "y")))
    insts[0].hung = "was hung (blocked): before"
    insts[1].stopped = True
    check.cut(verdict, seen)
    assert port.cuts == [] and port.collections == []
    assert insts[0].hung == "was hung (blocked): before" and insts[1].hung == ""


def test_a_stopped_process_is_cut_without_collecting_stacks():
    port, check, insts = job(2)
    ticks(check, 1, 4)
    check.tick(5.0)
    assert port.probes == [0, 1]
    check.probed(insts[1], b"T\n", 5.0)
    check.probed(insts[0], b"S", 5.0)
    ticks(check, 6, 14)
    check.probed(insts[1], b"T", 10.0)
    assert port.cuts == []
    check.tick(15.0)
    assert port.cuts == [insts[1]] and port.collections == []
    assert insts[1].hung == ("was hung (stopped): its process was stopped (T) at every probe for "
                             "10 s; pid 1001; bound 10 s (--hang-timeout)")


def test_a_process_that_runs_again_starts_its_stopped_time_again():
    port, check, insts = job(1)
    check.probed(insts[0], b"D", 1.0)
    check.probed(insts[0], b"R", 8.0)
    check.probed(insts[0], b"D", 9.0)
    ticks(check, 1, 18)
    assert port.cuts == []
    check.tick(19.0)
    assert port.cuts == [insts[0]]
    assert "in an uninterruptible wait (D) at every probe for 10 s" in insts[0].hung


def test_a_process_writing_in_d_at_every_probe_is_not_cut():
    port, check, insts = job(1)
    for t in range(1, 60, 5):
        check.probed(insts[0], f"D {t * 1000}".encode(), float(t))  # more written each time
        ticks(check, t, t + 4)
    assert port.cuts == [] and insts[0].hung == ""
    for t in range(61, 80, 5):
        check.probed(insts[0], b"D 56000", float(t))  # then nothing more: hung in D
        ticks(check, t, t + 4)
    assert port.cuts == [insts[0]]


def test_two_hung_instances_are_both_cut(capsys):
    port, check, insts = job(3)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    report_at(check, insts[2], 1.0, "blocked", "program", "main thread in get at queue.py:1")
    ticks(check, 1, 11)
    assert [c[0] for c in port.collections] == [[insts[1], insts[2]]]
    port.collections[0][4]()
    assert port.cuts == [insts[1], insts[2]]
    assert insts[1].hung.startswith("was hung (blocked): no CPU and no I/O for 10 s")
    assert insts[2].hung.startswith("was hung (blocked): no CPU and no I/O for 10 s")
    assert "main thread in get at queue.py:1" in insts[2].hung
    err = capsys.readouterr().err
    assert "poprun-lite: hang check: instance 1 (host host1) was hung (blocked)" in err
    assert "poprun-lite: hang check: instance 2 (host host2) was hung (blocked)" in err


def test_a_busy_instance_waits_for_the_busy_timeout():
    port, check, insts = job(2, timeout=10.0, busy_timeout=30.0)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "busy", "program", "main thread in train at prog.py:3")
    ticks(check, 1, 30)
    assert port.collections == []
    check.tick(31.0)
    assert insts[1].hung == (
        "was hung (busy): it ran its own code (CPU, I/O or a moving stack) for 30 s in its own "
        "code, outside any collective; main thread in train at prog.py:3; its peers waited "
        "(instance 0 in collective allreduce); rank 1, pid 1001; bound 30 s "
        "(--hang-busy-timeout)")


def test_the_default_bounds_are_named_as_such():
    port, check, insts = job(2, timeout=None)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    assert check.clock.bounds() == Bounds(30.0, 180.0, 600.0)
    ticks(check, 1, 180)
    assert port.collections == []
    check.tick(181.0)
    assert insts[1].hung.endswith("; rank 1, pid 1001; bound 180 s (the default hang bound)")


def test_absent_when_horovod_names_its_rank_missing():
    # --hang-timeout 9: Horovod's stall check every 3 s, its word holds 3 x 3 + 5 = 14 s
    port, check, insts = job(3, timeout=9.0)
    # ranks are not indices: instance 2 is rank 0 (it prints the stall lines), instance 0 rank 2
    report_at(check, insts[0], 1.0, "waiting", "tensorflow", rank=2)
    report_at(check, insts[1], 1.0, "waiting", "tensorflow", rank=1)
    report_at(check, insts[2], 1.0, "waiting", "tensorflow", rank=0)
    stall = STALL.replace(b"0: [clipped_grad]\n", b"")
    half = stall.index(b"1: [") + 10
    check.output(insts[2], stall[:half], 6.0)
    check.output(insts[2], stall[half:], 6.0)
    assert check.tracks[1].missing == \
        "'DistributedGradientTape_Allreduce/cond/HorovodAllreduce_grads_0'"
    assert check.tracks[0].missing == "" and check.tracks[2].missing == ""
    ticks(check, 1, 9)
    assert port.collections == []
    check.tick(10.0)
    assert insts[1].hung == (
        "was hung (absent): it waited in a TensorFlow step, not computing (a graph collective) "
        "for 9 s, and Horovod's stall check names it missing from "
        "'DistributedGradientTape_Allreduce/cond/HorovodAllreduce_grads_0'; its peers waited "
        "(instances 0, 2 in a TensorFlow step, not computing (a graph collective)); rank 1, "
        "pid 1001; bound 9 s (--hang-timeout)")
    assert insts[0].hung == "" and insts[2].hung == ""


def test_horovods_word_for_an_instance_that_left_its_wait_counts_no_more():
    port, check, insts = job(2, timeout=9.0)
    report_at(check, insts[0], 1.0, "waiting", "tensorflow", rank=0)
    report_at(check, insts[1], 1.0, "waiting", "tensorflow", rank=1)
    stall = STALL.replace(b"0: [clipped_grad]\n", b"")
    check.output(insts[0], stall, 2.0)
    assert check.tracks[1].missing != ""
    report_at(check, insts[1], 3.0, "waiting", "tensorflow", left=1, rank=1)  # left a wait
    assert check.tracks[1].missing == ""
    ticks(check, 1, 100)
    assert port.collections == [] and port.cuts == []


def test_horovods_word_holds_three_stall_checks_so_it_must_be_repeated():
    # the default bound learned from a 200 s interval: 1000 s, past the word's 3 x 60 + 5 s
    for repeated in (False, True):
        port, check, insts = job(2, timeout=None)
        check.progress(insts[0], 0.0)  # under way
        check.progress(insts[0], 200.0)
        report_at(check, insts[0], 200.0, "waiting", "tensorflow", rank=0)
        report_at(check, insts[1], 200.0, "waiting", "tensorflow", rank=1)
        assert check.clock.bounds() == Bounds(1000.0, 1000.0, 1000.0)
        stall = STALL.replace(b"0: [clipped_grad]\n", b"")
        for t in range(201, 1300):
            if t == 201 or (repeated and (t - 201) % 60 == 0):
                check.output(insts[0], stall, float(t))
            check.tick(float(t))
            if port.collections:
                break
        if repeated:
            assert t == 1200 and insts[1].hung.startswith(
                "was hung (absent): it waited in a TensorFlow step, not computing (a graph "
                "collective) for 1000 s, and Horovod's stall check names it missing from")
            assert insts[1].hung.endswith("bound 1000 s (the default hang bound)")
        else:
            assert port.collections == [] and insts[1].hung == ""


def test_output_without_the_stall_inspectors_lines_is_ignored():
    port, check, insts = job(2)
    check.output(insts[0], b"1: [looks like a rank line]\n", 1.0)
    check.output(insts[0], b"Epoch 1/3\n", 1.0)
    assert check.tracks[1].missing == "" and check.tracks[0].missing == ""


def test_missing_ranks_split_inside_the_header_still_reach_the_check():
    stall = STALL.replace(b"0: [clipped_grad]\n", b"")
    cut = stall.index(b"Missing ranks") + len(b"Missing")
    port, check, insts = job(2)
    report_at(check, insts[1], 1.0, "waiting", "tensorflow", rank=1)
    check.output(insts[0], stall[:cut], 2.0)
    check.output(insts[0], stall[cut:], 2.0)
    assert check.tracks[1].missing == \
        "'DistributedGradientTape_Allreduce/cond/HorovodAllreduce_grads_0'"


def test_alone_once_a_peer_ended_well():
    port, check, insts = job(2)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "waiting", "collective allreduce")
    ticks(check, 1, 5)
    ended(insts[0])
    check.ended(insts[0], 5.0, True)
    ticks(check, 6, 14)
    assert port.collections == []
    check.tick(15.0)
    assert insts[1].hung == ("was hung (alone): its peers ended 10 s ago and it still waits in "
                             "collective allreduce; rank 1, pid 1001; bound 10 s "
                             "(--hang-timeout)")
    assert [c[0] for c in port.collections] == [[insts[1]]]


def test_a_peer_that_failed_or_the_evaluator_leaves_nobody_alone():
    port, check, insts = job(2)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "waiting", "collective allreduce")
    ended(insts[0])
    check.ended(insts[0], 5.0, False)  # its failure ends the job anyway
    ticks(check, 1, 1000)
    assert port.collections == [] and insts[1].hung == ""
    port, check, insts = job(2, evaluator=True)
    for inst in insts[:2]:
        report_at(check, inst, 1.0, "waiting", "collective allreduce")
    ended(insts[2])
    check.ended(insts[2], 5.0, True)
    ticks(check, 1, 1000)
    assert port.collections == [] and check.ended_at is None


def test_the_evaluator_neither_waits_nor_is_waited_for():
    port, check, insts = job(2, evaluator=True)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[2], 1.0, "blocked", "program", READ)
    ticks(check, 1, 1000)
    assert port.collections == [] and all(not i.hung for i in insts)


def test_a_new_round_starts_every_instances_time_again():
    port, check, insts = job(2)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program", READ)
    ticks(check, 1, 7)
    check.restart(8.0)
    ticks(check, 8, 17)
    assert port.collections == []
    check.tick(18.0)
    assert insts[1].hung.startswith("was hung (blocked): no CPU and no I/O for 10 s")


def test_a_new_round_forgets_the_peer_that_ended():
    port, check, insts = job(3)
    report_at(check, insts[1], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[2], 1.0, "waiting", "collective allreduce")
    ended(insts[0])
    check.ended(insts[0], 2.0, True)
    check.restart(3.0)
    assert check.ended_at is None
    ticks(check, 1, 500)
    assert port.collections == []


def test_reports_and_progress_teach_the_default_clock_once_the_job_is_under_way():
    port, check, insts = job(2, timeout=None)
    assert check.clock.last == 0.0
    report_at(check, insts[0], 60.0, "busy", "import")  # starting up: no interval
    report_at(check, insts[0], 90.0, "waiting", "collective allreduce")
    report_at(check, insts[0], 95.0, "busy", "program", left=1)  # a wait completed: under way
    assert check.clock.bounds() == Bounds(30.0, 180.0, 600.0) and check.clock.last == 95.0
    check.progress(insts[0], 195.0)  # 100 s
    assert check.clock.bounds() == Bounds(500.0, 500.0, 600.0)
    check.where(insts[0], b"not a report", 300.0)
    check.where(Instance(7, "elsewhere"), position_report.encode(0, 7, "busy", "program", ""),
                300.0)
    assert check.clock.bounds() == Bounds(500.0, 500.0, 600.0)
    report_at(check, insts[0], 395.0, "waiting", "collective allreduce", left=1)  # 200 s on
    assert check.clock.bounds() == Bounds(1000.0, 1000.0, 1000.0)
    report_at(check, insts[0], 500.0, "waiting", "collective allreduce", detail="x",
              left=1)  # nothing new
    assert check.clock.last == 395.0
    check.restart(600.0)  # a new round starts up again: no interval until it is under way
    report_at(check, insts[0], 900.0, "busy", "program", left=1)
    report_at(check, insts[0], 905.0, "waiting", "collective allreduce", left=1)
    assert check.clock.learned() == 1000.0 and check.clock.last == 905.0


# ---- a collectives watchdog's stall ------------------------------------------------------------

def test_a_stall_names_the_instance_that_never_joined():
    port, check, insts = job(3)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "busy", "program", "main thread in train at prog.py:3")
    report_at(check, insts[2], 1.0, "waiting", "collective allreduce")
    failure = check.stall_failure(insts[0], "allreduce waited 60 s; tensor grads_0", 70.0)
    assert failure == Failure(report.Cause(
        "a collective stalled: instance 0 (host host0) waited too long (allreduce waited 60 s); "
        "never joined: instance 1 (its own code, outside any collective).", 1), 124, "stall")


def test_a_stall_reported_outside_a_collective_names_where_the_others_are():
    port, check, insts = job(3)
    report_at(check, insts[0], 1.0, "waiting", "tensorflow")
    report_at(check, insts[1], 1.0, "busy", "program")
    report_at(check, insts[2], 1.0, "waiting", "collective allreduce")
    failure = check.stall_failure(insts[0], "step timed out", 70.0)
    assert failure.cause == report.Cause(
        "a collective stalled: instance 0 (host host0) waited too long (step timed out); the "
        "others were: instance 1 in its own code, outside any collective; instance 2 in "
        "collective allreduce.", None)
    assert (failure.exit_code, failure.kind) == (124, "stall")


def test_only_the_first_stall_of_a_live_job_counts():
    port, check, insts = job(2)
    report_at(check, insts[0], 1.0, "waiting", "collective allreduce")
    report_at(check, insts[1], 1.0, "blocked", "program")
    check.on_stall(insts[0], "allreduce waited 60 s", False, 70.0)
    assert check.stall is None and port.collections == []
    check.on_stall(insts[0], "allreduce waited 60 s", True, 70.0)
    check.on_stall(insts[1], "other", True, 71.0)
    assert check.stall.cause.instance == 1
    assert [(c[0], c[1], c[2], c[3]) for c in port.collections] == [
        (None, "instance 0 reported a stall: allreduce waited 60 s", "stall", 0)]
