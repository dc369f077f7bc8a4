"""The hang check's decisions as pure functions: who is hung given where every instance is
(launcher/hang_decision.py), the learned bound and its first-step bound (launcher/hang.py), and
where a sampled stack is (popdist_launcher/whereabouts.py). No process is started."""
import importlib
import importlib.util
import sys
import threading

import pytest

from popdist_launcher import whereabouts
from popdist_launcher.launcher.hang import FIRST_STEP_S, HANG_FACTOR, HANG_FLOOR_S, HangWatch
from popdist_launcher.launcher.hang_decision import UNKNOWN, Position, decide, parse

PROGRAM = Position("program")
STEP = Position("tensorflow")


def coll(name):
    return Position("collective", name)


def test_an_instance_in_its_own_code_while_the_others_wait_is_hung():
    verdict = decide({0: coll("allreduce"), 1: PROGRAM, 2: coll("allreduce")})
    assert verdict.hung == (1,) and verdict.why == "absent"
    assert verdict.peers == "instances 0, 2 in collective allreduce"


def test_peers_waiting_in_a_tensorflow_step_count_as_waiting():
    verdict = decide({0: STEP, 1: PROGRAM, 2: PROGRAM, 3: STEP})
    assert verdict.hung == (1, 2) and verdict.why == "absent"
    assert verdict.peers.startswith("instances 0, 3 in a TensorFlow step")


def test_nobody_waiting_is_a_long_phase_not_a_hang():
    assert decide({0: PROGRAM, 1: PROGRAM}).hung == ()
    assert decide({0: STEP, 1: STEP}).hung == ()
    assert decide({0: coll("allreduce"), 1: coll("allreduce")}).hung == ()


def test_a_tensorflow_step_that_computes_waits_for_nobody():
    computing = Position("computing")
    assert decide({0: computing, 1: coll("allreduce")}).hung == ()
    assert decide({0: computing, 1: PROGRAM}).hung == ()
    assert decide({0: computing, 1: PROGRAM, 2: STEP}).hung == (1,)


def test_a_marked_long_phase_holds_every_verdict():
    verdict = decide({0: Position("long", "evaluation"), 1: coll("allreduce"), 2: PROGRAM})
    assert verdict.hung == () and "evaluation" in verdict.note


def test_a_mismatch_blames_the_minority():
    verdict = decide({0: coll("allreduce"), 1: coll("broadcast_object > broadcast"),
                      2: coll("allreduce")})
    assert verdict.hung == (1,) and verdict.why == "mismatch"
    assert verdict.peers == "instances 0, 2 in collective allreduce"


def test_a_mismatch_without_a_majority_names_everyone():
    verdict = decide({0: coll("sync > broadcast_variables"),
                      1: coll("sync > broadcast_object > broadcast")})
    assert verdict.hung == (0, 1) and verdict.why == "mismatch"
    assert "instance 0 in collective sync > broadcast_variables" in verdict.peers
    assert "instance 1 in collective sync > broadcast_object > broadcast" in verdict.peers


def test_an_eager_collective_against_a_graph_step_is_a_mismatch():
    verdict = decide({0: STEP, 1: STEP, 2: coll("broadcast_object > broadcast")})
    assert verdict.hung == (2,) and verdict.why == "mismatch"


def test_instances_that_never_reported_are_never_blamed():
    assert decide({0: UNKNOWN, 1: coll("allreduce")}).hung == ()
    assert decide({0: UNKNOWN, 1: PROGRAM}).hung == ()


def test_parse_reads_the_samplers_reports():
    assert parse("3 collective sync > broadcast_variables") == \
        (3, coll("sync > broadcast_variables"))
    assert parse("0 program") == (0, PROGRAM)
    assert parse("x program") == (0, UNKNOWN)
    assert parse("1 nonsense") == (1, UNKNOWN)


# ---- the bound -------------------------------------------------------------------------------

def test_the_default_bound_is_longer_for_the_first_step_then_learned_with_a_floor():
    watch = HangWatch(None)
    assert watch.deadline() is None  # nothing runs yet
    watch.start(100.0)
    assert watch.bound() == FIRST_STEP_S and watch.deadline() == 100.0 + FIRST_STEP_S
    watch.moved(0, 1, STEP, 101.0)
    assert watch.bound() == FIRST_STEP_S  # left a wait once: maybe still its first step
    watch.moved(0, 2, PROGRAM, 102.0)
    assert watch.bound() == HANG_FLOOR_S
    watch.moved(1, 0, STEP, 122.0)  # 20 s without any event
    assert watch.bound() == HANG_FACTOR * 20.0
    watch.restart(200.0)  # a new round: its workers start again
    assert watch.bound() == FIRST_STEP_S and not watch.past_first


def test_a_given_hang_timeout_overrides_and_zero_turns_it_off():
    watch = HangWatch(4.0)
    watch.start(10.0)
    assert watch.bound() == 4.0 and watch.deadline() == 14.0
    off = HangWatch(0.0)
    off.start(10.0)
    assert off.bound() is None and off.deadline() is None


def test_where_decides_after_no_process_is_stopped():
    watch = HangWatch(5.0)
    watch.start(0.0)
    watch.moved(0, 4, coll("allreduce"), 1.0)
    watch.moved(1, 4, PROGRAM, 1.5)
    watch.probe([0, 1], 7.0)
    watch.answer(0, "S")
    watch.answer(1, "R")
    assert watch.verdict(7.5) == {}
    assert watch.where([0, 1]).hung == (1,)
    watch.forget(1)
    assert watch.where([0]).hung == ()


# ---- where a stack is --------------------------------------------------------------------------

def _spin(ready, stop):
    ready.set()
    while not stop.is_set():
        pass


def test_a_thread_in_its_own_code_is_in_the_program():
    here = sys._getframe()
    assert whereabouts.classify(here, whereabouts._library_dirs(), "") == "program"


def test_a_long_phase_is_reported_while_it_runs():
    main = threading.main_thread().ident
    with whereabouts.long_phase("evaluation"):
        assert whereabouts.position(sys._current_frames(), main, set()) == "long evaluation"
    assert whereabouts.position(sys._current_frames(), main, set()) == "program"


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
