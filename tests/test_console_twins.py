"""Identical start-up lines of several instances on the console: the fast layer (which lines are
TensorFlow's start-up lines, how long they are held, in what order lines come out) without a
process, then real jobs through the CLI on the local and mpi backends: one copy with the
instances' range, every line in --output-dir's logs, the report's tail without the notices,
-v showing everything."""
import sys

import pytest

from conftest import poprun
from popdist_launcher.launcher.output import startup_lines
from popdist_launcher.launcher.output.twins import (NOTICE_WINDOW_SECONDS, WINDOW_SECONDS, Group,
                                                    Passed, Twins, instance_ranges)

# As TensorFlow 2.21 (absl) and 2.15 (its own logging) write them.
ABSL_WARNING = b"WARNING: All log messages before absl::InitializeLog() is called are written " \
               b"to STDERR\n"
ONEDNN = b"I0000 00:00:1795834646.987807    %d port.cc:153] oneDNN custom operations are on. " \
         b"You may see slightly different numerical results due to floating-point round-off " \
         b"errors from different computation orders.\n"
CPU = b"I0000 00:00:1795834647.204838    %d cpu_feature_guard.cc:227] This TensorFlow binary " \
      b"is optimized to use available CPU instructions in performance-critical operations.\n" \
      b"To enable the following instructions: AVX2 FMA, in other operations, rebuild " \
      b"TensorFlow with the appropriate compiler flags.\n"
TF215_ONEDNN = b"2024-01-31 12:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom " \
               b"operations are on.\n"
RENDEZVOUS = b"W0000 00:00:1795834650.1    %d local_rendezvous.cc:405] Local rendezvous is " \
             b"aborting with status: OUT_OF_RANGE: End of sequence\n"


def test_start_up_lines_are_recognised_and_keyed_without_time_and_thread():
    assert startup_lines.is_notice(ABSL_WARNING)
    assert startup_lines.is_notice(ONEDNN % 7) and startup_lines.is_notice(TF215_ONEDNN)
    assert all(startup_lines.is_notice(line) for line in (CPU % 7).splitlines())
    assert not startup_lines.is_notice(RENDEZVOUS % 7)
    assert startup_lines.twin_key(RENDEZVOUS % 7) == startup_lines.twin_key(RENDEZVOUS % 8) \
        == b"W local_rendezvous.cc:405] Local rendezvous is aborting with status: OUT_OF_RANGE: " \
           b"End of sequence"
    assert startup_lines.twin_key(TF215_ONEDNN) == \
        b"I tensorflow/core/util/port.cc:113] oneDNN custom operations are on."
    for other in (b"epoch 1 loss 0.5\n", b"Traceback (most recent call last):\n",
                  b"WARNING:tensorflow:From x.py:3: something\n", b"x" * 5000 + b"\n"):
        assert startup_lines.twin_key(other) is None and not startup_lines.is_notice(other)
    assert startup_lines.without_notices(["a", ABSL_WARNING.decode().strip(), "b"]) == ["a", "b"]


def test_instance_ranges():
    assert instance_ranges([3, 0, 1, 2]) == "0-3"
    assert instance_ranges([0, 1, 3, 5, 6]) == "0-1,3,5-6"
    assert instance_ranges([4]) == "4"


def writers_of(*indices):
    return lambda stream: list(indices)


def test_a_line_every_writer_wrote_is_shown_once_at_once():
    twins = Twins(writers_of(0, 1, 2))
    assert twins.feed(0, "stderr", ONEDNN % 10, 0.0) == []
    assert twins.feed(2, "stderr", ONEDNN % 12, 0.1) == []
    assert twins.deadline == NOTICE_WINDOW_SECONDS
    assert twins.feed(1, "stderr", ONEDNN % 11, 0.2) == [Group("stderr", (0, 2, 1), ONEDNN % 10)]
    assert twins.deadline is None
    # a notice: at most once per job, however late the next instance writes it
    assert twins.feed(1, "stderr", ONEDNN % 11, 60.0) == []
    assert "oneDNN" in twins.shown.pop().decode()


def test_a_held_line_waits_only_its_window_and_an_instances_lines_keep_their_order():
    twins = Twins(writers_of(0, 1))
    assert twins.feed(0, "stderr", RENDEZVOUS % 10, 5.0) == []
    assert twins.due(5.0 + WINDOW_SECONDS / 2) == []
    assert twins.due(5.0 + WINDOW_SECONDS) == [Group("stderr", (0,), RENDEZVOUS % 10)]
    # not a notice: the same line later is held (and shown) again
    assert twins.feed(0, "stderr", RENDEZVOUS % 10, 9.0) == []
    # instance 0's next line of the same stream comes after its held line, at once; another
    # stream's lines do not wait for it
    assert twins.feed(0, "stdout", b"epoch 1\n", 9.1) == [Passed(0, "stdout", b"epoch 1\n")]
    assert twins.feed(0, "stderr", b"Traceback\nboom\n", 9.2) == [
        Group("stderr", (0,), RENDEZVOUS % 10), Passed(0, "stderr", b"Traceback\nboom\n")]


def test_lines_around_held_ones_pass_whole_and_unfinished_lines_are_never_held():
    twins = Twins(writers_of(0, 1))
    line = RENDEZVOUS % 10
    shown = twins.feed(0, "stderr", b"before\n" + line + b"after\npart", 0.0)
    assert shown == [Passed(0, "stderr", b"before\n"), Group("stderr", (0,), line),
                     Passed(0, "stderr", b"after\npart")]
    # the rest of an unfinished line is not a line of its own, even when it looks like one
    assert twins.feed(0, "stderr", ABSL_WARNING, 0.1) == [Passed(0, "stderr", ABSL_WARNING)]
    # a notice, which tells nothing of the program, still waits for its twins
    assert twins.feed(1, "stderr", ABSL_WARNING + b"own line\n", 0.2) == [
        Passed(1, "stderr", b"own line\n")]
    assert twins.feed(0, "stderr", b"end\n" + ABSL_WARNING, 0.3) == [
        Passed(0, "stderr", b"end\n"), Group("stderr", (1, 0), ABSL_WARNING)]


def test_an_instance_that_ends_is_no_longer_waited_for():
    writers = [0, 1]
    twins = Twins(lambda stream: writers)
    assert twins.feed(0, "stderr", ABSL_WARNING, 0.0) == []
    writers.remove(1)
    assert twins.closed(1, "stderr") == [Group("stderr", (0,), ABSL_WARNING)]
    assert twins.feed(1, "stdout", ABSL_WARNING, 0.1) == []  # shown once per job, any stream
    assert twins.release_all() == []


# Each instance writes once all have started (a barrier of files in the folder it is given), as
# instances importing TensorFlow together do.
NOISY = (
    "import os, sys, time\n"
    "i, n = int(os.environ['POPDIST_INSTANCE_INDEX']), int(os.environ['POPDIST_NUM_INSTANCES'])\n"
    "folder = sys.argv[1]\n"
    "open(os.path.join(folder, f'started-{i}'), 'w').close()\n"
    "while len([f for f in os.listdir(folder) if f.startswith('started-')]) < n:\n"
    "    time.sleep(0.01)\n"
    "out = sys.stderr.buffer\n"
    f"out.write({ABSL_WARNING!r} + ({ONEDNN!r} % (100 + i)) + ({CPU!r} % (100 + i)))\n"
    "out.flush()\n"
    "time.sleep(0.05 * i)\n"
    "out.write(f'instance {i} says its own thing\\n'.encode())\n"
    f"out.write({RENDEZVOUS!r} % (100 + i))\n"
    "out.flush()\n"
    f"out.write({ABSL_WARNING!r})\n"  # as a second TensorFlow library loading writes it again
    "print(f'result {i}')\n"
    "if i == 1 and len(sys.argv) > 2:\n"
    "    out.flush()\n"
    "    os.kill(os.getpid(), 9)\n"
)


@pytest.fixture(params=["local", "mpi"])
def backend(request):
    return ["--backend", request.param]


def test_start_up_lines_are_shown_once_with_the_instances_range(backend, tmp_path):
    result = poprun("-np", "4", *backend, "--output-dir", str(tmp_path / "logs"), sys.executable,
                    "-c", NOISY, str(tmp_path))
    assert result.returncode == 0, result.stderr
    err = result.stderr.splitlines()
    assert err.count("[0-3]<stderr>:" + ABSL_WARNING.decode().strip()) == 1
    assert sum("oneDNN" in line for line in err) == 1
    # (the copy shown is that of the instance that wrote it first)
    cpu = [line for line in err if "cpu_feature_guard" in line or "To enable" in line]
    assert len(cpu) == 2 and all(line.startswith("[0-3]<stderr>:") for line in cpu)
    assert cpu[1] == "[0-3]<stderr>:" + (CPU % 100).decode().splitlines()[1]
    assert sum(line.startswith("[0-3]<stderr>:") and "local_rendezvous" in line
               for line in err) == 1
    for i in range(4):
        assert f"[{i}]<stderr>:instance {i} says its own thing" in err
        assert f"[{i}]<stdout>:result {i}" in result.stdout.splitlines()
        # ... and after it the log line it wrote after it
        assert err.index(f"[{i}]<stderr>:instance {i} says its own thing") < \
            next(n for n, line in enumerate(err) if "local_rendezvous" in line)
        log = (tmp_path / "logs" / "attempt-0" / f"instance-{i}.stderr.log").read_bytes()
        assert log == (ABSL_WARNING + ONEDNN % (100 + i) + CPU % (100 + i)
                       + f"instance {i} says its own thing\n".encode() + RENDEZVOUS % (100 + i)
                       + ABSL_WARNING)
    assert len(err) == 1 + 1 + 2 + 1 + 4  # every line on the console once


def test_verbose_shows_every_line(backend, tmp_path):
    result = poprun("-np", "2", *backend, "-v", sys.executable, "-c", NOISY, str(tmp_path))
    assert result.returncode == 0, result.stderr
    err = result.stderr.splitlines()
    for i in range(2):
        assert err.count(f"[{i}]<stderr>:" + ABSL_WARNING.decode().strip()) == 2
        assert sum(line.startswith(f"[{i}]<stderr>:") and "oneDNN" in line for line in err) == 1


def test_the_report_quotes_what_the_instance_wrote_besides_the_notices(backend, tmp_path):
    result = poprun("-np", "2", *backend, sys.executable, "-c", NOISY, str(tmp_path), "kill")
    assert result.returncode == 137, result.stderr
    cause = result.stderr.split("root cause =====", 1)[1]
    assert "instance 1 was killed by SIGKILL" in cause
    quoted = cause.split("stderr:\n", 1)[1].split("poprun-lite:", 1)[0].splitlines()
    assert [line.strip() for line in quoted] == [
        "instance 1 says its own thing", (RENDEZVOUS % 101).decode().strip()]


KILL_WRAPPER = ("import os, time\n"
                "if os.environ['POPDIST_INSTANCE_INDEX'] == '1':\n"
                "    os.kill(os.getppid(), 9)\n"  # its wrapper: mpirun tells of a rank killed
                "time.sleep(30)\n")


def test_mpiruns_own_lines_about_an_end_the_launcher_explained_are_kept_in_the_log(tmp_path):
    result = poprun("-np", "2", "--backend", "mpi", "--output-dir", str(tmp_path), "python",
                    "-c", KILL_WRAPPER)
    assert result.returncode != 0
    assert "instance 1 (host localhost) lost its wrapper" in result.stderr
    assert "[mpirun]:" not in result.stderr
    log = tmp_path / "attempt-0" / "mpirun.log"
    assert f"mpirun's own lines about the job's end are not shown (-v shows them); they are in " \
           f"{log}." in result.stderr
    assert "exited on\nsignal 9 (Killed)." in log.read_text()
    shown = poprun("-np", "2", "--backend", "mpi", "-v", "python", "-c", KILL_WRAPPER)
    assert "[mpirun]: signal 9 (Killed)." in shown.stderr
