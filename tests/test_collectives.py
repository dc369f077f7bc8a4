"""popdist_launcher.collectives: exact results over real poprun-lite jobs, errors, stall watchdog.

Each job runs every check of every mode (eager, tf.function, Session) in one process per
instance (tests/workers/collectives_checks.py) and the tests compare the JSON it writes with
values computed here from the instance count. The mismatch jobs prove that a shape or dtype
mismatch, or an instance that never calls, ends with an error naming the tensor in bounded time.
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"
MODES = ("eager", "function", "session")
DTYPES = ("float16", "float32", "float64", "int16", "int32", "int64")
INT_DTYPES = ("int16", "int32", "int64")
STALL_TIMEOUT = 3.0
EXIT_STALLED = 3  # tests/workers/collectives_mismatch.py


def launch(num_instances: int, script: str, args: List[str], timeout: float
           ) -> Tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("POPRUN_COLLECTIVES_STALL_TIMEOUT", None)
    command = [sys.executable, "-m", "popdist_launcher", "-np", str(num_instances),
               str(WORKERS / script), *args]
    started = time.monotonic()
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as launcher:
        try:
            out, err = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM: the launcher forwards it to its instances (SIGKILL after its grace period).
            launcher.terminate()
            try:
                out, err = launcher.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                launcher.kill()
                out, err = launcher.communicate()
            pytest.fail(f"poprun-lite -np {num_instances} {script} still running after "
                        f"{timeout:g} s\n{out[-4000:]}\n{err[-6000:]}")
    proc = subprocess.CompletedProcess(command, launcher.returncode, out, err)
    return proc, time.monotonic() - started


def load_instances(out_dir: Path, num_instances: int, proc: subprocess.CompletedProcess
                   ) -> List[Dict[str, Any]]:
    found = []
    for rank in range(num_instances):
        path = out_dir / f"instance-{rank}.json"
        assert path.exists(), (f"instance {rank} wrote no results (exit {proc.returncode})\n"
                               f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        found.append(json.loads(path.read_text()))
    return found


# ---- the jobs, one per instance count (module scope: each costs tens of seconds) ---------------
@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"np{n}")
def job(request, tmp_path_factory) -> Dict[str, Any]:
    n = request.param
    out_dir = tmp_path_factory.mktemp(f"collectives-np{n}")
    proc, seconds = launch(n, "collectives_checks.py", [str(out_dir)], timeout=540)
    assert proc.returncode == 0, \
        f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    instances = load_instances(out_dir, n, proc)
    return {"n": n, "instances": instances, "seconds": seconds}


# ---- expected values ---------------------------------------------------------------------------
def trunc_div(a: int, b: int) -> int:
    """Integer division rounded toward zero (the documented integer Average)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def mean(total: float, n: int, dtype: str):
    return trunc_div(total, n) if dtype in INT_DTYPES else total / n


def cast(values, dtype: str):
    if isinstance(values, list):
        return [cast(v, dtype) for v in values]
    return int(values) if dtype in INT_DTYPES else float(values)


def expected_checks(n: int, family: str) -> Dict[str, Any]:
    """check name (without the mode) -> expected value, for one family of checks."""
    ranks = range(n)
    out: Dict[str, Any] = {}
    for d in DTYPES:
        is_int = d in INT_DTYPES
        base = [[r, r + 1, -(r + 2)] for r in ranks]
        sums = [sum(b[i] for b in base) for i in range(3)]
        if family == "allreduce_ops":
            assert sums[0] == n * (n - 1) // 2  # the sum of the ranks
            out[f"allreduce_sum/{d}"] = cast(sums, d)
            out[f"allreduce_named/{d}"] = cast(sums, d)
            out[f"allreduce_average/{d}"] = cast([mean(s, n, d) for s in sums], d)
            out[f"allreduce_default_op/{d}"] = out[f"allreduce_average/{d}"]
            out[f"allreduce_min/{d}"] = cast([0, 1, -(n + 1)], d)
            out[f"allreduce_max/{d}"] = cast([n - 1, n, -2], d)
            out[f"allreduce_product/{d}"] = cast(
                [0, math.factorial(n), (-1) ** n * math.factorial(n + 1)], d)
        elif family == "scaling":
            if is_int:  # prescale 3, postscale 2, applied exactly
                out[f"scaled_sum/{d}"] = [6 * s for s in sums]
                out[f"scaled_average/{d}"] = [2 * trunc_div(3 * s, n) for s in sums]
            else:
                out[f"scaled_sum/{d}"] = [2.0 * 0.25 * s for s in sums]
                out[f"scaled_average/{d}"] = [3.0 * 0.5 * s / n for s in sums]
        elif family == "allgather":
            out[f"allgather_rank/{d}"] = cast(list(ranks), d)
            out[f"allgather_scalar/{d}"] = cast(list(ranks), d)
            out[f"allgather_ragged/{d}"] = cast([[r, r] for r in ranks for _ in range(r + 1)], d)
        elif family == "broadcast":
            for root in (0, n - 1):
                out[f"broadcast_root{root}/{d}"] = cast([10 * root + 1, 10 * root + 2], d)
        elif family == "indexed_slices":
            values = [[2 * r + 1, -(2 * r + 1)] for r in ranks]
            indices = [n - 1 - r for r in ranks]
            out[f"indexed_slices_sum/{d}"] = {
                "values": cast(values, d), "indices": indices, "dense_shape": [n, 2]}
            out[f"indexed_slices_average/{d}"] = {
                "values": cast([[mean(v, n, d) for v in row] for row in values], d),
                "indices": indices, "dense_shape": [n, 2]}
        elif family == "broadcast_variables":
            root = 1
            out[f"broadcast_variables/{d}"] = [cast([root + 5, root + 6], d), cast([[root * 2]], d)]
        elif family == "grouped_allreduce":
            first = [sum(r + 1 for r in ranks), sum(2 * r for r in ranks)]
            third = [sum(3 * r for r in ranks)]
            matrix = [[float(sum(ranks))], [1.5 * n]]
            sparse = {"values": cast([[r + 1] for r in ranks], d), "indices": list(ranks),
                      "dense_shape": None}
            out[f"grouped_allreduce_sum/{d}"] = [cast(first, d), matrix, cast(third, d), sparse]
            out[f"grouped_allreduce_average/{d}"] = [
                cast([mean(v, n, d) for v in first], d),
                [[sum(ranks) / n], [1.5]],
                cast([mean(v, n, d) for v in third], d),
                {"values": cast([[mean(r + 1, n, d)] for r in ranks], d),
                 "indices": list(ranks), "dense_shape": None}]
        else:
            raise AssertionError(family)
    return out


FAMILIES = ("allreduce_ops", "scaling", "allgather", "broadcast", "indexed_slices",
            "broadcast_variables", "grouped_allreduce")


def test_expected_values_are_exact_here() -> None:
    # The expectations use the documented rounding: toward zero, unlike Python's //.
    assert trunc_div(-5, 2) == -2 and trunc_div(5, 2) == 2 and trunc_div(-14, 4) == -3
    assert expected_checks(2, "allreduce_ops")["allreduce_average/int32"] == [0, 1, -2]
    assert expected_checks(4, "allreduce_ops")["allreduce_sum/float32"] == [6.0, 10.0, -14.0]


# ---- results of the jobs -----------------------------------------------------------------------
def test_identity(job) -> None:
    n = job["n"]
    for rank, inst in enumerate(job["instances"]):
        assert inst["identity"] == {"rank": rank, "size": n, "local_rank": rank,
                                    "local_size": n, "initialized": True}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_collective_results(job, mode: str, family: str) -> None:
    n = job["n"]
    wrong = []
    for check, want in expected_checks(n, family).items():
        for rank, inst in enumerate(job["instances"]):
            got = inst["checks"].get(f"{mode}/{check}", "<missing>")
            if got != want:
                wrong.append(f"instance {rank} {mode}/{check}: got {got!r}, expected {want!r}")
    assert not wrong, f"{len(wrong)} wrong result(s) with -np {n}:\n" + "\n".join(wrong[:40])


def test_collectives_in_one_function_do_not_wait_for_each_other(job) -> None:
    n = job["n"]
    for inst in job["instances"]:
        assert inst["checks"]["function/independent_collectives"] == {
            "second_waits_for_first": False,
            # The stall marks in a tf.function: counters, no Python, off the results' path.
            "python_callbacks": [], "begin_marks": 2, "consumers_wait_for_end_marks": False,
            "values": [[n * (n - 1) / 2, float(n)], [2.0 * n, n * (n - 1) / 2]]}


def test_argument_errors(job) -> None:
    n = job["n"]
    for inst in job["instances"]:
        errors = {k.split("/", 1)[1]: v["error"] for k, v in inst["checks"].items()
                  if k.startswith("errors/")}
        assert errors["int_fractional_scale"].startswith("ValueError: prescale_factor=0.5")
        assert errors["sparse_max"].startswith("ValueError: allreduce of tf.IndexedSlices")
        assert errors["bad_op"].startswith("ValueError: op 'median' is not supported")
        assert errors["bad_root"] == (f"ValueError: root_rank must be an instance index in "
                                      f"0..{n - 1}, got {n}.")


# ---- mismatches and stalls ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_mismatches_fail_fast_and_name_the_tensor(tmp_path, mode: str) -> None:
    proc, seconds = launch(2, "collectives_mismatch.py", [mode, str(tmp_path), str(STALL_TIMEOUT)],
                           timeout=240)
    output = proc.stdout + proc.stderr
    # the job ends as a stalled job (docs/job-end.md), after instance 0 exits with its error
    assert proc.returncode == 124, f"exit {proc.returncode}\n{output[-6000:]}"
    first, second = load_instances(tmp_path, 2, proc)

    # Shape and dtype mismatches: an error on every instance at once, naming the tensor;
    # Horovod keeps working afterwards.
    for inst in (first, second):
        assert "Mismatched ALLREDUCE tensor shapes" in inst["shape"]["error"]
        assert "mismatched_shape" in inst["shape"]["error"]
        assert "Mismatched data types" in inst["dtype"]["error"]
        assert "mismatched_dtype" in inst["dtype"]["error"]
        assert inst["shape"]["type"] == inst["dtype"]["type"] == "FailedPreconditionError"
        assert inst["after"] == {"value": [2.0], "error": None}

    # Instance 1 never submits 'lonely_grad': instance 0 fails after about the stall timeout.
    stall = first["stall"]
    assert stall["error"] is not None and "lonely_grad" in stall["error"]
    assert STALL_TIMEOUT <= stall["elapsed"] <= STALL_TIMEOUT + 15, stall
    if mode == "eager":
        assert stall["type"] == "DeadlineExceededError"
        assert "collective stall on instance 0 of 2" in stall["error"]
    else:  # the Horovod op's own error, raised by Session.run / the function call
        assert "Horovod has been shut down" in stall["error"]
    assert first["initialized_after_stall"] is False
    # The watchdog's log line names the tensor and the knob.
    assert "collective stall on instance 0 of 2: allreduce 'lonely_grad'" in output
    assert "stall timeout 3 s" in output and "POPRUN_COLLECTIVES_STALL_TIMEOUT" in output
    assert "poprun-lite: instance 0" in output and f"exited with code {EXIT_STALLED}" in output


# ---- in-process: before init(), configuration, the watchdog rule ------------------------------
def test_collectives_before_init_raise_value_error() -> None:
    import tensorflow as tf

    from popdist_launcher import collectives as C

    assert not C.is_initialized()
    calls = {
        "allreduce": lambda: C.allreduce(tf.constant([1.0])),
        "grouped_allreduce": lambda: C.grouped_allreduce([tf.constant([1.0])]),
        "allgather": lambda: C.allgather(tf.constant([1.0])),
        "broadcast": lambda: C.broadcast(tf.constant([1.0]), root_rank=0),
        "broadcast_variables": lambda: C.broadcast_variables([tf.Variable([1.0])]),
        "size": C.size, "rank": C.rank, "local_size": C.local_size, "local_rank": C.local_rank,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=r"call popdist_launcher\.collectives\.init\(\) first"):
            call()
    C.shutdown()  # a no-op before init()
    assert (C.Average, C.Sum, C.Min, C.Max, C.Product) == _horovod_ops()


def _horovod_ops():
    import horovod.tensorflow as hvd
    return hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product


def test_top_level_package_does_not_import_tensorflow() -> None:
    code = ("import sys, popdist_launcher; "
            "bad = [m for m in ('tensorflow', 'horovod') if m in sys.modules]; "
            "sys.exit(f'imported {bad}' if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_stall_timeout_resolution(monkeypatch) -> None:
    from popdist_launcher.collectives import _state

    monkeypatch.delenv(_state.STALL_TIMEOUT_ENV, raising=False)
    assert _state.resolve_stall_timeout(None) == _state.DEFAULT_STALL_TIMEOUT == 300.0
    assert _state.resolve_stall_timeout(12) == 12.0
    assert _state.resolve_stall_timeout(0) == 0.0
    monkeypatch.setenv(_state.STALL_TIMEOUT_ENV, "45")
    assert _state.resolve_stall_timeout(None) == 45.0
    assert _state.resolve_stall_timeout(5) == 5.0  # the argument wins
    monkeypatch.setenv(_state.STALL_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="POPRUN_COLLECTIVES_STALL_TIMEOUT='soon'"):
        _state.resolve_stall_timeout(None)
    with pytest.raises(ValueError, match="must be 0"):
        _state.resolve_stall_timeout(-1)
    for value in ("inf", "nan", "-inf"):
        monkeypatch.setenv(_state.STALL_TIMEOUT_ENV, value)
        with pytest.raises(ValueError, match=f"positive, finite number of seconds, got {value}"):
            _state.resolve_stall_timeout(None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_watchdog_fires_only_after_a_quiet_timeout() -> None:
    from popdist_launcher.collectives._watchdog import StallWatchdog

    clock, fired = Clock(), []
    wd = StallWatchdog(10, fired.append, where=" on instance 0 of 2", clock=clock)
    assert wd.check() is None  # nothing pending
    clock.now += 60
    old = wd.begin("allreduce 'a'")
    clock.now += 9
    assert wd.check() is None
    stuck = wd.begin("allreduce 'b'")
    clock.now += 2  # 'a' waited 11 s, nothing completed in that time
    message = wd.check()
    assert message is not None and message.startswith(  # newest first
        "collective stall on instance 0 of 2: allreduce 'b' (waiting 2.0 s), "
        "allreduce 'a' (waiting 11.0 s); no collective has completed on this instance for 11.0 s")
    wd.end(old)  # a completion is progress: the quiet period restarts
    assert wd.check() is None
    clock.now += 10.5
    message = wd.check()
    assert "allreduce 'b' (waiting 12.5 s)" in message and "for 10.5 s" in message
    wd.fire(message)
    wd.fire("again")  # fires once
    assert fired == [message] and wd.stall_message(stuck) == message
    assert wd.stall_message(old) is None and wd.wait_stopped(0)
    assert wd.check() is None  # one-shot


def test_watchdog_forgets_marks_of_aborted_graph_steps() -> None:
    from popdist_launcher.collectives._watchdog import StallWatchdog

    clock, running = Clock(), [True]
    wd = StallWatchdog(5, lambda m: None, clock=clock, graph_running=lambda: running[0])
    wd.begin("allreduce 'x'", key=1, in_graph=True)
    clock.now += 3
    token = wd.begin("allreduce 'x'", key=1, in_graph=True)  # the same op again: replaces
    clock.now += 4
    assert wd.check() is None and wd.pending_descriptions() == ["allreduce 'x'"]
    clock.now += 2
    assert "allreduce 'x' (waiting 6.0 s)" in wd.check()
    running[0] = False  # no thread inside TensorFlow: the step was aborted
    assert wd.check() is None and wd.pending_descriptions() == []
    wd.end(token)  # late ends are harmless


class Counters:
    """Fake tf.function counters, stamped like the function's ops do (wall-clock seconds)."""

    def __init__(self, clock: Clock, names) -> None:
        from popdist_launcher.collectives._watchdog import ProbeRegistry

        self.clock = clock
        self.values = {name: [0, 0, 0.0, 0.0, False] for name in names}
        self.probes = ProbeRegistry()
        for name in names:
            self.probes.add(f"allreduce '{name}'", functools.partial(self.read, name))

    def wall(self) -> float:
        return self.clock.now + 5000.0  # another clock than the watchdog's

    def read(self, name: str):
        from popdist_launcher.collectives._watchdog import ProbeValues
        return ProbeValues(*self.values[name])

    def begin(self, name: str) -> None:
        self.values[name][0] += 1
        self.values[name][2] = self.wall()

    def end(self, name: str) -> None:
        self.values[name][1] = self.values[name][0]
        self.values[name][3] = self.wall()


def test_watchdog_reads_the_counters_of_function_collectives() -> None:
    from popdist_launcher.collectives._watchdog import StallWatchdog

    clock, running = Clock(), [True]
    counters = Counters(clock, ["a", "b"])
    wd = StallWatchdog(5, lambda m: None, where=" on instance 1 of 2", clock=clock,
                       graph_running=lambda: running[0], probes=counters.probes,
                       wall=counters.wall)
    assert wd.check() is None and wd.pending_descriptions() == []
    counters.begin("a")
    clock.now += 1
    assert wd.check() is None and wd.pending_descriptions() == ["allreduce 'a'"]
    clock.now += 4.5  # 5.5 s since it began (its own stamp, not the poll that first saw it)
    message = wd.check()
    assert message.startswith("collective stall on instance 1 of 2: allreduce 'a' "
                              "(waiting 5.5 s); no collective has completed")
    counters.end("a")  # it completes: progress, nothing pending
    counters.begin("b")
    assert wd.check() is None and wd.pending_descriptions() == ["allreduce 'b'"]
    clock.now += 3
    counters.begin("a")  # 'a' again, while 'b' waits: both pending
    assert wd.check() is None
    assert wd.pending_descriptions() == ["allreduce 'b'", "allreduce 'a'"]
    clock.now += 2.5
    # Newest first: what the instance submitted last is what it waits on.
    assert "stall on instance 1 of 2: allreduce 'a' (waiting 2.5 s), allreduce 'b' (waiting " \
           "5.5 s)" in wd.check()
    running[0] = False  # no step is running: those runs were aborted
    assert wd.check() is None and wd.pending_descriptions() == []
    running[0] = True
    counters.begin("a")
    counters.end("a")  # a later run of 'a' completes: the aborted run stays forgotten
    assert wd.check() is None and wd.pending_descriptions() == []
    counters.values["b"][:2] = [2, 0]
    counters.values["b"][4] = True  # 'b''s function is gone: read once more, then dropped
    assert wd.check() is None and len(counters.probes) == 1 and wd.pending_descriptions() == []


def test_watchdog_names_what_the_instance_waits_on_not_an_errored_step() -> None:
    # A step's collective fails (e.g. mismatched shapes), a later step completes one, the next
    # waits forever; the watchdog's thread got no time in between (a busy machine), so it first
    # sees all of it at once, and the errored step's thread never looked idle to it.
    from popdist_launcher.collectives._watchdog import StallWatchdog

    clock = Clock()
    counters = Counters(clock, ["mismatched", "after", "lonely"])
    wd = StallWatchdog(3, lambda m: None, where=" on instance 0 of 2", clock=clock,
                       probes=counters.probes, wall=counters.wall)
    counters.begin("mismatched")  # its step raised: the run never ends
    clock.now += 0.01
    counters.begin("after")
    clock.now += 0.01
    counters.end("after")
    clock.now += 0.5
    counters.begin("lonely")
    clock.now += 2.7  # 3.2 s since the last completion, but 'lonely' waited only 2.7 s
    assert wd.check() is None
    clock.now += 0.8
    message = wd.check()
    assert message.startswith("collective stall on instance 0 of 2: allreduce 'lonely' "
                              "(waiting 3.5 s); no collective has completed on this instance "
                              "for 3.5 s")
    assert "mismatched" not in message
    # Without a completion in between, both are named, the newest first.
    clock = Clock()
    counters = Counters(clock, ["mismatched", "lonely"])
    wd = StallWatchdog(3, lambda m: None, clock=clock, probes=counters.probes,
                       wall=counters.wall)
    counters.begin("mismatched")
    clock.now += 0.5
    counters.begin("lonely")
    clock.now += 3.5
    assert wd.check().startswith("collective stall: allreduce 'lonely' (waiting 3.5 s), "
                                 "allreduce 'mismatched' (waiting 4.0 s);")
