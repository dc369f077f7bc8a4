"""mpirun's session directory: a killed mpirun's leftovers never fail a later job.

Open MPI keeps its session directory in ``$TMPDIR/ompi.<mpirun's pid>`` and leaves it behind when
mpirun is killed; a later mpirun that gets the same pid finds the old PMIx rendezvous files and
stops with "The PMIx server's listener thread failed to start" (exit 213; seen in CI, where the
suite's many processes wrap the pid numbers). The launcher gives each mpirun a session base of
its own and removes it when the attempt ends, or, should the launcher itself be killed, its
watchdog does (``launcher/layout/backends/mpi.py``, ``launcher/supervision/processes.py``).
These tests run the real mpirun and the real launcher.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import LAUNCHER, job_environ, program, read_pids, wait_for_files, wait_gone
from popdist_launcher.launcher.layout.backends import detect
from popdist_launcher.launcher.layout.backends.mpi import mpirun_options

pytestmark = pytest.mark.skipif(detect.find_mpirun() is None, reason="needs Open MPI's mpirun")

# Leaves a killed mpirun's rendezvous file where Open MPI's default session directory for this
# process's pid lies, then becomes mpirun (same pid) with the launcher's options.
LEFTOVER_THEN_MPIRUN = r"""
import os, socket, sys
from popdist_launcher.launcher.layout.backends.mpi import mpirun_options
stale = os.path.join(os.environ["TMPDIR"], f"ompi.{os.getpid()}")
os.mkdir(stale)
open(os.path.join(stale, f"pmix.{socket.gethostname()}.tool.{os.getpid()}"), "w").close()
scratch = sys.argv[2] or None
argv = mpirun_options(sys.argv[1], False, [], scratch) + ["-np", "1", "true"]
os.execv(argv[0], argv)
"""


def leftover_then_mpirun(tmp_path, scratch):
    env = dict(job_environ(), TMPDIR=str(tmp_path))
    return subprocess.run([sys.executable, "-c", LEFTOVER_THEN_MPIRUN, detect.find_mpirun(),
                           scratch or ""], capture_output=True, text=True, env=env, timeout=60)


def test_a_killed_mpiruns_leftovers_fail_mpirun_in_its_default_place(tmp_path):
    # The cause, as CI met it: without a base of its own, mpirun cannot start.
    result = leftover_then_mpirun(tmp_path, None)
    assert result.returncode == 213, result.stderr
    assert "PMIx server's listener thread failed to start" in result.stderr


def test_under_the_launchers_session_base_mpirun_starts_beside_them(tmp_path):
    result = leftover_then_mpirun(tmp_path, str(tmp_path / "poprun-lite-mpi-test"))
    assert result.returncode == 0, result.stderr


def test_a_users_own_session_base_is_kept():
    argv = mpirun_options("mpirun", False, ["--prtemca", "prte_tmpdir_base", "/scratch"],
                          "/tmp/poprun-lite-mpi-1-ab")
    assert "prte_local_tmpdir_base" not in argv
    assert "prte_local_tmpdir_base" in mpirun_options("mpirun", False, [], "/tmp/x")


def session_folders(tmpdir):
    return sorted(name for name in os.listdir(tmpdir)
                  if name.startswith(("ompi.", "poprun-lite-mpi-")))


@pytest.mark.parametrize("action, code", [("exit:0", 0), ("exit:3@1", 3)])
def test_a_jobs_session_folder_is_gone_when_it_ends(tmp_path, pid_dir, action, code):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = subprocess.run([*LAUNCHER, "-np", "2", "--backend", "mpi", program("behave.py"),
                             str(pid_dir), action], capture_output=True, text=True,
                            env=dict(job_environ(), TMPDIR=str(tmpdir)), timeout=120)
    assert result.returncode == code, result.stderr
    assert session_folders(tmpdir) == []


def test_a_killed_launchers_mpirun_leaves_no_session_folder(tmp_path, pid_dir):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    job = subprocess.Popen([*LAUNCHER, "-np", "2", "--backend", "mpi", program("behave.py"),
                            str(pid_dir), "sleep:120"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=dict(job_environ(), TMPDIR=str(tmpdir)))
    try:
        wait_for_files([pid_dir / "pid-0", pid_dir / "pid-1"], timeout=60)
        folders = session_folders(tmpdir)
        assert len(folders) == 1 and folders[0].startswith("poprun-lite-mpi-"), folders
        # mpirun's session directory lies in the launcher's folder, not in TMPDIR itself.
        assert any(name.startswith("ompi.") for name in os.listdir(tmpdir / folders[0]))
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=10)
        assert wait_gone(read_pids(pid_dir, "pid"), timeout=30) == []
        deadline = time.monotonic() + 30
        while session_folders(tmpdir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_folders(tmpdir) == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
