"""IPUMultiWorkerStrategy under poprun-lite outlives a worker's whole-process stall longer than
the 10 s after which TensorFlow's coordination service (2.9+) ends the job by default
(popdist_launcher.strategies._coordination): Graphcore's strategy, on TensorFlow 2.6, had no
such service, and the launcher's own hang check judges a silent instance."""
import json
import os
import signal
import time

import pytest

from conftest import poprun_background, program, wait_for_files

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["local", "mpi"])
def test_a_worker_stopped_for_15_s_does_not_end_the_job(tmp_path, backend):
    job = poprun_background("--backend", backend, "-np", "2", program("multi_worker_stall.py"),
                            str(tmp_path))
    try:
        wait_for_files([tmp_path / "pid-0", tmp_path / "pid-1"], timeout=240)
        worker = int((tmp_path / "pid-1").read_text())
        os.kill(worker, signal.SIGSTOP)
        time.sleep(15)  # what is tested: a stall past TensorFlow's default heartbeat timeout
        os.kill(worker, signal.SIGCONT)
        (tmp_path / "go").touch()
        _, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, stderr[-4000:]
    for task in range(2):
        assert json.loads((tmp_path / f"result-{task}.json").read_text()) == [3.0, 30.0]
