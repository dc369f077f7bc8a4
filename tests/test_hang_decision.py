"""The hang check's decision as a pure function
(popdist_launcher/launcher/supervision/hang/decision.py: ``decide`` and ``describe_groups``, every
kind and every rule that never cuts, from ``Seen`` snapshots and explicit ``Bounds``), and the
program-side sampler's pure parts (popdist_launcher/whereabouts.py: ``classify``, ``position``,
``_own_frame`` on fake stacks, ``Activity`` on this process's own threads, ``Sampler``'s reports,
``encode``/``decode``, ``long_phase``, the Keras checkpointing callbacks' long phases). No process
is started."""
import importlib
import importlib.util
import os
import sys
import threading
import time
import types

import pytest

from popdist_launcher import whereabouts
from popdist_launcher.launcher.supervision.hang import Bounds
from popdist_launcher.launcher.supervision.hang.decision import Hung, describe_groups, decide
from popdist_launcher.launcher.supervision.hang.evidence import Position, Seen
from popdist_launcher.wire import position_report, stack_pipe

B = Bounds(30.0, 180.0, 600.0)  # short, wait, long (the default floors)
PROGRAM = Position("program")
STEP = Position("tensorflow")
COMPUTING = Position("computing")
EXIT = Position("exit")
PROGRAM_WORDS = "its own code, outside any collective"
STEP_WORDS = "a TensorFlow step, not computing (a graph collective)"


def coll(name="allreduce"):
    return Position("collective", name)


def waits(where=None, s=1000.0, **kw):
    """An instance that has waited ``s`` seconds (in collective allreduce by default)."""
    return Seen(where or coll(), "waiting", position_s=s, activity_s=s, **kw)


def own(activity, s=1000.0, activity_s=None, where=PROGRAM, detail="", **kw):
    """An instance in its own code for ``s`` seconds with ``activity``."""
    return Seen(where, activity, detail, position_s=s,
                activity_s=s if activity_s is None else activity_s, **kw)


# ---- stopped -----------------------------------------------------------------------------------

@pytest.mark.parametrize("state, words", [("T", "stopped (T)"), ("t", "stopped by a tracer (t)"),
                                          ("D", "in an uninterruptible wait (D)")])
def test_a_stopped_process_is_hung_at_the_short_bound_not_before(state, words):
    before = decide({0: waits(), 1: own("busy", 5.0, state=state, state_s=29.9)}, B)
    assert before.hung == ()
    verdict = decide({0: waits(), 1: own("busy", 5.0, state=state, state_s=30.0)}, B)
    assert verdict.hung == (Hung(1, "stopped", 30.0,
                                 f"its process was {words} at every probe for 30 s"),)
    assert verdict.peers == "" and verdict.note == ""


def test_running_or_sleeping_states_are_never_stopped():
    for state in ("R", "S", ""):
        assert decide({0: Seen(PROGRAM, "busy", state=state, state_s=1e6)}, B).hung == ()


def test_stopped_ones_are_named_alone_lowest_first_and_not_held_by_a_long_phase():
    seen = {2: Seen(Position("long", "evaluation"), "busy", state="D", state_s=31.0),
            0: Seen(PROGRAM, "busy", state="T", state_s=100.0),
            1: own("blocked", 1e5)}  # blocked too, but a stopped verdict comes alone
    verdict = decide(seen, B, alone_s=1e5)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(0, "stopped", 100.0),
                                                                 (2, "stopped", 31.0)]


# ---- alone: its peers ended --------------------------------------------------------------------

def test_alone_waiting_in_a_collective_at_the_short_bound():
    assert decide({1: waits()}, B, alone_s=29.0).hung == ()
    verdict = decide({1: waits()}, B, alone_s=30.0)
    assert verdict.hung == (Hung(1, "alone", 30.0, "its peers ended 30 s ago and it still "
                                                   "waits in collective allreduce"),)
    assert verdict.note == "its peers ended"


def test_alone_is_held_as_long_as_it_waited_not_longer():
    assert decide({1: waits(s=10.0)}, B, alone_s=100.0).hung == ()
    verdict = decide({1: waits(where=STEP, s=45.0)}, B, alone_s=100.0)
    assert verdict.hung == (Hung(1, "alone", 45.0, "its peers ended 100 s ago and it still "
                                                   f"waits in {STEP_WORDS}"),)


def test_alone_at_interpreter_exit_or_blocked_at_the_short_bound():
    detail = "thread worker in run at prog.py:9"
    verdict = decide({0: Seen(EXIT, "waiting", detail, position_s=40.0)}, B, alone_s=40.0)
    assert verdict.hung == (Hung(0, "alone", 40.0, "its peers ended 40 s ago and it waits at "
                                                   f"interpreter exit for a thread; {detail}"),)
    verdict = decide({0: own("blocked", detail="main thread in get at queue.py:171")}, B,
                     alone_s=30.0)
    assert verdict.hung == (Hung(0, "alone", 30.0, "its peers ended 30 s ago and it is blocked "
                                                   f"in {PROGRAM_WORDS}; main thread in get at "
                                                   "queue.py:171"),)
    assert decide({0: own("blocked")}, B, alone_s=29.0).hung == ()


def test_working_alone_is_busy_at_the_long_bound():
    detail = "main thread in train at prog.py:3"
    assert decide({0: own("busy", detail=detail)}, B, alone_s=599.0).hung == ()
    verdict = decide({0: own("busy", detail=detail)}, B, alone_s=600.0)
    assert verdict.hung == (Hung(0, "busy", 600.0, "its peers ended 600 s ago and it ran its "
                                                    f"own code since; {detail}"),)


def test_alone_but_sleeping_or_computing_is_never_hung():
    assert decide({0: own("sleeping", 1e6)}, B, alone_s=1e6).hung == ()
    assert decide({0: own("busy", 1e6, where=COMPUTING)}, B, alone_s=1e6).hung == ()
    assert decide({0: own("blocked", 1e6, where=COMPUTING)}, B, alone_s=1e6).hung == ()


def test_alone_blocked_or_busy_is_held_only_as_long_as_it_has_been_so():
    # "The time held is how long both it and its peers have been so" (as _holder does it)
    assert decide({0: own("blocked", 1000.0, activity_s=1.0)}, B, alone_s=30.0).hung == ()
    assert decide({0: own("busy", 1e4, activity_s=1.0)}, B, alone_s=600.0).hung == ()


def test_alone_without_an_ended_peer_is_no_verdict():
    verdict = decide({1: waits(s=1e6)}, B, alone_s=None)
    assert verdict.hung == ()
    assert verdict.note == "nobody is outside the collectives the others wait in"


# ---- absent -------------------------------------------------------------------------------------

def test_absent_named_missing_by_horovod_while_waiting_in_a_tensorflow_step():
    seen = {0: waits(STEP, 500.0), 1: waits(STEP, 180.0, missing="'grads_0'")}
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "absent", 180.0,
                                 f"it waited in {STEP_WORDS} for 180 s, and Horovod's stall "
                                 "check names it missing from 'grads_0'"),)
    assert verdict.peers == f"instance 0 in {STEP_WORDS}"
    seen[1] = waits(STEP, 179.0, missing="'grads_0'")
    assert decide(seen, B).hung == ()


def test_absent_is_held_only_as_long_as_the_peers_waited():
    seen = {0: waits(STEP, 100.0), 1: waits(STEP, 5000.0, missing="'grads_0'")}
    verdict = decide(seen, B)
    assert verdict.hung == () and verdict.peers == f"instance 0 in {STEP_WORDS}"


def test_when_horovod_names_someone_missing_a_busy_tensorflow_step_waits_too():
    # instance 0's own generator runs inside its step: without Horovod's word it does not wait
    busy_step = Seen(STEP, "busy", position_s=500.0, activity_s=500.0)
    verdict = decide({0: busy_step, 1: waits(STEP, 200.0, missing="'x'")}, B)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(1, "absent", 200.0)]
    assert decide({0: busy_step, 1: waits(STEP, 200.0)}, B).hung == ()


def test_absent_from_the_majoritys_collective_is_the_minority():
    seen = {0: waits(coll(), 200.0), 1: waits(coll("broadcast_object > broadcast"), 190.0),
            2: waits(coll(), 195.0)}
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "absent", 190.0,
                                 "it waited in collective broadcast_object > broadcast for "
                                 "190 s while its peers waited in another"),)
    assert verdict.peers == "instances 0, 2 in collective allreduce"
    seen[1] = waits(coll("broadcast_object > broadcast"), 179.0)
    verdict = decide(seen, B)
    assert verdict.hung == ()
    assert verdict.note == "the instances wait in different collectives, not long yet"


def test_a_mismatch_without_a_majority_names_every_member():
    seen = {0: waits(coll("sync > broadcast_variables"), 300.0),
            1: waits(coll("sync > broadcast_object > broadcast"), 250.0)}
    verdict = decide(seen, B)
    none = "the others waited in different collectives, none in the majority"
    assert verdict.hung == (
        Hung(0, "absent", 250.0, f"it waited in collective sync > broadcast_variables for "
                                 f"250 s while {none}"),
        Hung(1, "absent", 250.0, f"it waited in collective sync > broadcast_object > broadcast "
                                 f"for 250 s while {none}"))
    assert verdict.peers == ("instance 0 in collective sync > broadcast_variables; instance 1 "
                             "in collective sync > broadcast_object > broadcast")


def test_an_eager_collective_against_graph_steps_is_the_minority():
    seen = {0: waits(STEP), 1: waits(STEP), 2: waits(coll("broadcast_object > broadcast"))}
    verdict = decide(seen, B)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(2, "absent", 1000.0)]
    assert verdict.peers == f"instances 0, 1 in {STEP_WORDS}"


def test_absent_at_interpreter_exit_while_its_peers_wait():
    seen = {0: waits(s=500.0),
            1: Seen(EXIT, "blocked", "thread t in run at p.py:1", position_s=180.0)}
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "absent", 180.0, "its program ended 180 s ago and it waits "
                                                     "at interpreter exit for a thread; thread t "
                                                     "in run at p.py:1"),)
    seen[1] = Seen(EXIT, "blocked", position_s=179.0)
    assert decide(seen, B).hung == ()


# ---- blocked ------------------------------------------------------------------------------------

def test_blocked_at_the_wait_bound_from_the_time_it_blocked():
    detail = "main thread in read at prog.py:7"
    seen = {0: waits(), 1: own("blocked", 1000.0, activity_s=179.0, detail=detail)}
    verdict = decide(seen, B)
    assert verdict.hung == ()
    assert verdict.note == "the instances the others wait for are working, sleeping or not long"
    seen[1] = own("blocked", 1000.0, activity_s=180.0, detail=detail)
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "blocked", 180.0, f"no CPU and no I/O for 180 s in "
                                                      f"{PROGRAM_WORDS}; {detail}"),)
    assert verdict.peers == "instance 0 in collective allreduce"


def test_blocked_is_held_only_as_long_as_the_peers_waited():
    seen = {0: waits(s=179.0), 1: own("blocked", 1e5)}
    assert decide(seen, B).hung == ()
    seen[0] = waits(s=180.0)
    assert [(h.index, h.kind, h.held) for h in decide(seen, B).hung] == [(1, "blocked", 180.0)]


def test_blocked_says_when_horovod_names_it_missing_too():
    seen = {0: waits(STEP), 1: own("blocked", 200.0, missing="'grads_0'")}
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "blocked", 200.0, f"no CPU and no I/O for 200 s in "
                                                      f"{PROGRAM_WORDS}; Horovod's stall check "
                                                      "names it missing from 'grads_0'"),)


# ---- busy ---------------------------------------------------------------------------------------

def test_busy_only_at_the_long_bound_however_far_past_the_wait_bound():
    detail = "main thread in train at prog.py:3"
    seen = {0: waits(), 1: own("busy", 599.0, detail=detail)}
    assert decide(seen, B).hung == ()
    seen[1] = own("busy", 600.0, detail=detail)
    verdict = decide(seen, B)
    assert verdict.hung == (Hung(1, "busy", 600.0, "it ran its own code (CPU, I/O or a moving "
                                                   f"stack) for 600 s in {PROGRAM_WORDS}; "
                                                   f"{detail}"),)
    assert verdict.peers == "instance 0 in collective allreduce"


def test_busy_is_held_only_as_long_as_the_peers_waited():
    assert decide({0: waits(s=599.0), 1: own("busy", 1e5)}, B).hung == ()


def test_an_instance_without_reports_is_held_to_the_busy_bound():
    assert decide({0: waits(), 1: Seen(position_s=599.0)}, B).hung == ()
    verdict = decide({0: waits(), 1: Seen(position_s=600.0)}, B)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(1, "busy", 600.0)]
    assert "in an unknown place" in verdict.hung[0].evidence


def test_an_import_is_work_held_to_the_busy_bound_whatever_its_threads_or_horovod_say():
    # a worker that loads TensorFlow slowly while its peers wait: its other thread waiting on a
    # queue, Horovod naming it missing, a peer in a named collective: none of it is a hang
    loading = Position("import")
    for seen in ({0: waits(), 1: own("blocked", 599.0, where=loading)},
                 {0: waits(coll("sync > broadcast_object")),
                  1: own("waiting", 599.0, where=loading, missing="'x'")}):
        assert decide(seen, B).hung == ()
    verdict = decide({0: waits(), 1: own("blocked", 600.0, where=loading,
                                          detail="thread q in get at prog.py:9")}, B)
    assert verdict.hung == (Hung(1, "busy", 600.0, "it was in an import (loading modules) for "
                                                   "600 s; thread q in get at prog.py:9"),)


def test_an_import_left_alone_is_work_held_to_the_busy_bound():
    loading = own("blocked", 599.0, where=Position("import"))
    assert decide({0: loading}, B, alone_s=599.0).hung == ()
    verdict = decide({0: own("blocked", 600.0, where=Position("import"))}, B, alone_s=600.0)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(0, "busy", 600.0)]


def test_every_holder_past_its_bound_is_named():
    seen = {0: waits(), 1: own("blocked", 500.0), 2: own("busy", 700.0), 3: own("busy", 10.0)}
    verdict = decide(seen, B)
    assert [(h.index, h.kind, h.held) for h in verdict.hung] == [(1, "blocked", 500.0),
                                                                 (2, "busy", 700.0)]


# ---- never --------------------------------------------------------------------------------------

def test_an_instance_computing_in_tensorflow_is_never_hung_nor_waits():
    assert decide({0: waits(s=1e6), 1: own("busy", 1e6, where=COMPUTING)}, B).hung == ()
    assert decide({0: waits(s=1e6), 1: own("blocked", 1e6, where=COMPUTING)}, B).hung == ()
    verdict = decide({0: own("busy", 1e6, where=COMPUTING), 1: own("blocked", 1e6)}, B)
    assert verdict.hung == () and verdict.note == "nobody waits for another instance"


def test_a_sleeping_instance_is_never_hung():
    verdict = decide({0: waits(s=1e6), 1: own("sleeping", 1e6)}, B)
    assert verdict.hung == ()
    assert verdict.note == "the instances the others wait for are working, sleeping or not long"


def test_a_long_phase_anywhere_holds_every_verdict_but_stopped():
    seen = {0: waits(s=1e6), 1: own("blocked", 1e6), 2: own("busy", 1e6),
            3: Seen(Position("long", "evaluation"), "busy")}
    verdict = decide(seen, B, alone_s=1e6)
    assert verdict.hung == ()
    assert verdict.note == "instance 3 in long phase 'evaluation' (not a hang)"
    mismatch = {0: waits(coll("a")), 1: waits(coll("b")), 2: Seen(Position("long", "export"))}
    assert decide(mismatch, B).hung == ()


def test_nobody_waiting_is_no_hang():
    verdict = decide({0: own("blocked", 1e6), 1: own("busy", 1e6)}, B)
    assert verdict.hung == () and verdict.note == "nobody waits for another instance"
    verdict = decide({0: waits(s=1e6), 1: waits(s=1e6)}, B)
    assert verdict.hung == ()
    assert verdict.note == "nobody is outside the collectives the others wait in"
    assert decide({}, B).hung == ()


def test_the_names_of_the_peers_come_from_the_caller():
    names = {0: "instance 0", 1: "instance 1", 2: "evaluator"}
    seen = {0: waits(), 2: waits(), 1: own("blocked", 500.0)}
    verdict = decide(seen, B, name=names.__getitem__)
    assert verdict.peers == "instance 0, evaluator in collective allreduce"


# ---- describe_groups ----------------------------------------------------------------------------

def test_describe_groups_groups_by_position_in_index_order():
    positions = {0: coll(), 1: PROGRAM, 2: coll(), 3: STEP, 4: Position("long", "eval")}
    assert describe_groups(positions, [3, 2, 1, 0]) == (
        f"instances 0, 2 in collective allreduce; instance 1 in {PROGRAM_WORDS}; "
        f"instance 3 in {STEP_WORDS}")
    assert describe_groups(positions, [4]) == "instance 4 in long phase 'eval'"
    assert describe_groups(positions, []) == ""


def test_describe_groups_with_other_names():
    positions = {0: coll(), 1: coll(), 2: EXIT}
    names = {0: "instance 0", 1: "evaluator", 2: "evaluator-2"}.__getitem__
    assert describe_groups(positions, [0, 1, 2], names) == (
        "instance 0, evaluator in collective allreduce; evaluator-2 in interpreter exit, "
        "waiting for a thread")


# ---- where a stack is (whereabouts) -------------------------------------------------------------

class Frame:
    """A stand-in for a Python frame: what whereabouts reads of one."""

    def __init__(self, path, name="f", back=None, line=1):
        self.f_code = types.SimpleNamespace(co_filename=path, co_name=name)
        self.f_back = back
        self.f_lineno = line
        self.f_lasti = 0


def stack(*calls):
    """The innermost of frames (path, name[, line]) called outermost first."""
    frame = None
    for call in calls:
        frame = Frame(*call[:2], back=frame, line=call[2] if len(call) > 2 else 1)
    return frame


HOROVOD = "/env/site-packages/horovod/"
TF = "/env/site-packages/tensorflow/"
PROG = "/home/u/prog.py"


def test_a_thread_in_its_own_code_is_in_the_program():
    here = sys._getframe()
    assert whereabouts.classify(here, whereabouts._library_dirs(), "") == "program"


def test_classify_names_the_innermost_collectives():
    libraries = (HOROVOD, TF)
    nested = stack((PROG, "main"), (HOROVOD + "tensorflow/functions.py", "broadcast_object"),
                   (HOROVOD + "tensorflow/mpi_ops.py", "broadcast"),
                   (HOROVOD + "tensorflow/mpi_ops.py", "_broadcast"))
    assert whereabouts.classify(nested, libraries, HOROVOD) == \
        "collective broadcast_object > broadcast"
    ours = stack((PROG, "main"), (os.path.join(whereabouts._HERE, "collectives", "api.py"),
                                  "allreduce"), (PROG, "callback"))
    assert whereabouts.classify(ours, libraries, HOROVOD) == "collective allreduce"
    # without Horovod's directory its functions are not collectives, only library code
    assert whereabouts.classify(nested, libraries, "") == "tensorflow"


def test_classify_tells_library_code_from_the_programs():
    libraries = (TF, whereabouts._HERE)
    assert whereabouts.classify(stack((PROG, "main"), (TF + "eager/execute.py", "run")),
                                libraries, "") == "tensorflow"
    assert whereabouts.classify(stack((PROG, "main"), ("<frozen importlib._bootstrap>", "x")),
                                libraries, "") == "import"
    assert whereabouts.classify(stack((TF + "data/ops.py", "gen"), (PROG, "gen")),
                                libraries, "") == "program"
    sampler = stack((whereabouts.__file__, "sample"))
    assert whereabouts.classify(sampler, libraries, "") == "program"
    assert whereabouts.classify(None, libraries, "") == "program"


def test_position_at_interpreter_exit_and_of_a_main_thread_waiting_for_others():
    exiting = {1: stack((threading.__file__, "_shutdown"))}
    assert whereabouts.position(exiting, 1, set()) == "exit"
    ours = os.path.join(whereabouts._HERE, "collectives", "api.py")
    joined = {1: stack((PROG, "main"), (threading.__file__, "join")),
              2: stack((PROG, "train")), 3: stack((PROG, "train"), (ours, "allreduce"))}
    assert whereabouts.position(joined, 1, set()) == "collective allreduce"
    assert whereabouts.position(joined, 1, {3}) == "program"
    # the main thread decides when it runs the program's code itself
    running = dict(joined)
    running[1] = stack((PROG, "main"))
    assert whereabouts.position(running, 1, set()) == "program"
    assert whereabouts.position({}, 1, set()) == "program"


def test_own_frame_is_the_programs_innermost_frame():
    libraries = (TF,)
    queue_py = os.path.join(os.path.dirname(os.__file__), "queue.py")
    numpy = "/env/site-packages/numpy/core.py"
    gen = stack((PROG, "main", 10), (PROG, "gen", 41), (queue_py, "get"))
    found = whereabouts._own_frame(gen, libraries)
    assert (found.f_code.co_name, found.f_lineno) == ("gen", 41)
    by_program = stack((PROG, "main"), (numpy, "dot"))
    assert whereabouts._own_frame(by_program, libraries).f_code.co_name == "dot"
    by_tensorflow = stack((PROG, "main"), (TF + "ops.py", "call"), (numpy, "dot"))
    assert whereabouts._own_frame(by_tensorflow, libraries) is None
    joining = stack((PROG, "main"), (threading.__file__, "join"), (queue_py, "x"))
    assert whereabouts._own_frame(joining, libraries) is None
    idle = stack((threading.__file__, "_bootstrap"), (queue_py, "get"))
    assert whereabouts._own_frame(idle, libraries) is None


def test_a_long_phase_is_reported_while_it_runs():
    main = threading.main_thread().ident
    with whereabouts.long_phase("evaluation"):
        with whereabouts.long_phase("export\nmodel"):
            assert whereabouts.position(sys._current_frames(), main, set()) == \
                "long export model"
        assert whereabouts.position(sys._current_frames(), main, set()) == "long evaluation"
    assert whereabouts.position(sys._current_frames(), main, set()) == "program"


def test_a_long_phase_as_a_decorator_and_entered_again():
    import popdist_launcher
    main = threading.main_thread().ident

    @popdist_launcher.long_phase("evaluation")  # the public spelling, as a decorator
    def evaluate(value):
        return value, whereabouts.position(sys._current_frames(), main, set())

    assert evaluate.__name__ == "evaluate"
    assert evaluate(3) == (3, "long evaluation")
    phase = whereabouts.long_phase("save")
    with phase:
        with phase:
            pass
        assert whereabouts.position(sys._current_frames(), main, set()) == "long save"
    assert whereabouts.position(sys._current_frames(), main, set()) == "program"
    assert whereabouts._phases == {}


def _wait_here(ready, event):
    ready.set()
    event.wait()


def _sleep_here(ready):
    ready.set()
    time.sleep(0.4)


@pytest.mark.skipif(not whereabouts._SLEEPS, reason="sleep system calls unknown on this machine")
def test_activity_tells_a_blocked_thread_from_a_sleeping_one():
    libraries = whereabouts._library_dirs()
    activity = whereabouts.Activity()
    assert activity.look({}, set(), 0, libraries) == ("waiting", "")

    def look_at(thread):
        frames = sys._current_frames()
        return activity.look(frames, set(frames) - {thread.ident}, 0, libraries)

    ready, event = threading.Event(), threading.Event()
    waiter = threading.Thread(target=_wait_here, args=(ready, event), name="waiter")
    waiter.start()
    try:
        ready.wait()
        time.sleep(0.05)
        assert look_at(waiter)[0] == "busy"  # first seen: its stack moved
        time.sleep(0.05)
        kind, where = look_at(waiter)
        assert kind == "blocked"
        assert where.startswith("thread waiter in _wait_here at test_hang_decision.py:")
    finally:
        event.set()
        waiter.join()
    ready = threading.Event()
    sleeper = threading.Thread(target=_sleep_here, args=(ready,), name="sleeper")
    sleeper.start()
    ready.wait()
    time.sleep(0.05)
    look_at(sleeper)
    time.sleep(0.05)
    kind, where = look_at(sleeper)
    sleeper.join()
    assert kind == "sleeping"
    assert where.startswith("thread sleeper in _sleep_here at test_hang_decision.py:")


def test_encode_and_decode_one_line():
    line = position_report.encode(2, 1, "blocked", "collective sync > broadcast", "main\nthread\0x")
    assert line == b"2 1 blocked collective sync > broadcast\tmain thread x"
    assert position_report.decode(line.decode() + "\n") == \
        (2, 1, "blocked", "collective sync > broadcast", "main thread x")
    assert len(position_report.encode(0, 0, "busy", "program", "x" * 1000)) == 500
    for bad in ("", "1 2 napping program\t", "x 1 busy program\t"):
        with pytest.raises(ValueError):
            position_report.decode(bad)


def test_the_sampler_reports_changes_only_and_counts_the_waits_it_left(monkeypatch):
    places = iter(["collective allreduce", "collective allreduce", "program", "tensorflow",
                   "tensorflow", "tensorflow", "program", "program", "program", "tensorflow"])
    looks = iter([("waiting", "")] * 7 + [("busy", "main thread in a at p.py:1"),
                                          ("busy", "main thread in b at p.py:2"),
                                          ("waiting", "")])
    clock = [100.0]
    ticks = iter([0, 10 ** 6, 10 ** 6, 2 * 10 ** 6])
    monkeypatch.setattr(whereabouts, "position", lambda frames, main, skip: next(places))
    monkeypatch.setattr(whereabouts, "_rank", lambda: 3)
    monkeypatch.setattr(whereabouts, "_compute_ticks", lambda: next(ticks))
    monkeypatch.setattr(whereabouts, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    read, write = os.pipe()
    try:
        sampler = whereabouts.Sampler(write)
        sampler.activity.look = lambda *args: next(looks)
        for _ in range(10):
            sampler.sample()
            clock[0] += 1.0
        os.set_blocking(read, False)
        sent = os.read(read, 65536).split(b"\n")
    finally:
        os.close(read)
        os.close(write)
    assert all(line.startswith(stack_pipe.WHERE) for line in sent[:-1]) and sent[-1] == b""
    assert [line[len(stack_pipe.WHERE):].decode() for line in sent[:-1]] == [
        "0 3 waiting collective allreduce\t",
        "1 3 waiting program\t",
        # the first sample in a step is not told: its CPU is not known yet
        "1 3 waiting computing\t",  # its TensorFlow threads used a core since the last sample
        "1 3 waiting tensorflow\t",  # and then none
        "2 3 waiting program\t",
        "2 3 busy program\tmain thread in a at p.py:1",  # b: a busy thread's place waits 10 s
        "2 3 waiting computing\t"]  # told at once: CPU since the last look inside a step


def test_an_import_is_told_apart_from_a_step_that_a_module_runs_when_imported():
    libraries = (TF, HOROVOD, whereabouts._HERE)
    boot = "<frozen importlib._bootstrap>"
    loading = stack((PROG, "<module>"), (boot, "_find_and_load"), (TF + "__init__.py", "<module>"),
                    (boot, "_find_and_load"), (TF + "python/pywrap.py", "<module>"))
    assert whereabouts.classify(loading, libraries, HOROVOD) == "import"
    # a library loading its parts lazily inside the program's call is an import too
    lazy = stack((PROG, "main"), (TF + "util/lazy_loader.py", "__getattr__"), (boot, "_load"),
                 ("/env/site-packages/other/mod.py", "<module>"))
    assert whereabouts.classify(lazy, libraries, HOROVOD) == "import"
    # the program's own module, imported, that trains at its top level: a step, not an import
    trains = stack((PROG, "<module>"), (boot, "_find_and_load"), ("/home/u/lib.py", "<module>"),
                   (TF + "eager/execute.py", "run"))
    assert whereabouts.classify(trains, libraries, HOROVOD) == "tensorflow"
    waits_in = stack((boot, "_find_and_load"), ("/home/u/lib.py", "<module>"),
                     (HOROVOD + "tensorflow/mpi_ops.py", "allreduce"))
    assert whereabouts.classify(waits_in, libraries, HOROVOD) == "collective allreduce"


@pytest.mark.parametrize("callback", ["ModelCheckpoint", "BackupAndRestore"])
def test_keras_checkpointing_callbacks_save_inside_a_long_phase(tmp_path, monkeypatch, callback):
    """Keras' checkpointing callbacks (Keras 2, as this test process has it) are long phases
    while they write: what they write with (the model's save_weights, the checkpoint manager's
    save) runs inside one, and nothing is left marked afterwards."""
    import numpy as np
    import tensorflow as tf

    from popdist_launcher.compat import progress_hooks
    keras = importlib.import_module("tf_keras" if importlib.util.find_spec("tf_keras") else "keras")
    callbacks = importlib.import_module(keras.__name__ + ".src.callbacks")
    progress_hooks.install_keras_callbacks(callbacks)
    main = threading.main_thread().ident
    seen = []

    def here():
        seen.append(whereabouts.position(sys._current_frames(), main, set()))

    manager_save = tf.train.CheckpointManager.save
    monkeypatch.setattr(tf.train.CheckpointManager, "save",
                        lambda self, *a, **k: (here(), manager_save(self, *a, **k))[1])

    class Recording(keras.Model):
        def save_weights(self, *args, **kwargs):
            here()
            return super().save_weights(*args, **kwargs)

    inputs = keras.Input((2,))
    model = Recording(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    made = (callbacks.ModelCheckpoint(str(tmp_path / "ckpt.weights.h5"), save_weights_only=True)
            if callback == "ModelCheckpoint" else
            callbacks.BackupAndRestore(str(tmp_path / "backup")))
    model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, verbose=0, callbacks=[made])
    assert len(seen) >= 2 and set(seen) == {f"long Keras {callback} save"}, seen
    assert whereabouts.position(sys._current_frames(), main, set()) == "program"
