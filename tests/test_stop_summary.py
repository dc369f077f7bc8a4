"""The closing summary of a job stopped by Ctrl-C (SIGINT), through the real CLI on the local and
mpi backends: which instances were running, how each ended, what the programs reported saving."""
import signal

import pytest

from conftest import poprun_background, wait_for_files

PROGRAM = ("import os, sys, time, pathlib\n"
           "import popdist_launcher\n"
           "i = int(os.environ['POPDIST_INSTANCE_INDEX'])\n"
           "if i == 2:\n"
           "    sys.exit(0)\n"  # ended before the signal
           "if i == 0 and sys.argv[2] == 'saves':\n"
           "    popdist_launcher.report_progress(4)\n"
           "    popdist_launcher.report_progress(5)\n"
           "time.sleep(0.5)\n"  # (the report reaches the launcher before the marker)
           "pathlib.Path(sys.argv[1], f'ready-{i}').write_text(str(os.getpid()))\n"
           "time.sleep(120)\n")


@pytest.mark.parametrize("backend", ["local", "mpi"])
@pytest.mark.parametrize("saves", ["saves", "nothing"])
def test_ctrl_c_ends_with_a_summary_of_the_instances_and_what_was_saved(backend, saves, tmp_path):
    job = poprun_background("-np", "3", "--backend", backend, "--output-dir",
                            str(tmp_path / "logs"), "python", "-c", PROGRAM, str(tmp_path), saves)
    wait_for_files([tmp_path / "ready-0", tmp_path / "ready-1"], timeout=60)
    job.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 130, err
    summary = err.split("===== job stopped by SIGINT =====\n", 1)[1].splitlines()
    assert summary[0] == "poprun-lite: running when it came: instance(s) 0-1 of 3."
    assert summary[1] == ("poprun-lite: ended: 0: was killed by SIGINT (stopped); 1: was killed "
                          "by SIGINT (stopped); 2: exited with code 0.")
    if saves == "saves":
        assert summary[2].startswith("poprun-lite: saved: the last progress reported is 5, by "
                                     "instance(s) 0 (the number of the latest checkpoint")
    else:
        assert summary[2].startswith("poprun-lite: saved: no instance reported progress")
    assert summary[3] == f"poprun-lite: every instance's output is in {tmp_path / 'logs'}" \
                         f"/attempt-0."
