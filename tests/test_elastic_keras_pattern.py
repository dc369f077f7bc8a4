"""Horovod's elastic Keras pattern, unedited, under poprun-lite in Horovod mode: a plain
``KerasState`` built before any step (its optimizer has no variables yet) and Horovod's own
elastic Keras example, across a worker killed and started again in place and a host that the
discovery script adds mid-job. Every epoch is trained once and every rank ends with the same
model and optimizer variables. Both TensorFlow states sync from different starts; the optimizer
build that makes the sync the same on every rank (popdist_launcher/compat/horovod_keras_sync.py)
runs on real Keras optimizers."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import numpy as np
import pytest

from conftest import LAUNCHER, wait_gone

pytestmark = pytest.mark.usefixtures("horovod_cycle_5ms")  # conftest: idle Horovod cycling

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).parent / "workers"
# (program, its arguments after OUT_DIR, the epochs it trains)
PROGRAMS = {
    "keras-state-adam": ("elastic_keras_unedited.py", ["adam", "6", "8"], 6),
    "keras-state-legacy-sgd": ("elastic_keras_unedited.py", ["legacy-sgd", "6", "8"], 6),
    "horovod-example": ("elastic_keras_example.py", ["5", "24"], 5),
}


class Job:
    """One poprun-lite Horovod-mode job of a program of PROGRAMS, in the background."""

    def __init__(self, tmp: Path, program: str, options: List[str]) -> None:
        self.out = tmp / "out"
        self.out.mkdir(parents=True)
        name, args, self.epochs = PROGRAMS[program]
        self.console = tmp / "console.txt"
        env = {**os.environ, "ELASTIC_STEP_SLEEP": "0.1"}
        with open(self.console, "wb") as console:
            self.proc = subprocess.Popen(
                [*LAUNCHER, "--elastic-mode", "horovod", "--start-timeout", "120",
                 "-x", "ELASTIC_STEP_SLEEP", *options, "--output-dir", str(tmp / "logs"),
                 sys.executable, str(WORKERS / name), str(self.out), *args],
                stdout=console, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def epochs_logged(self) -> List[dict]:
        log = self.out / "epochs.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def workers(self) -> List[tuple]:
        """(pid, first rank, host) of every worker started so far."""
        found = []
        for path in self.out.glob("pid-*"):
            rank, _, host = path.read_text().partition(" ")
            found.append((int(path.name[4:]), int(rank), host))
        return found

    def finish(self, timeout: float = 300) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the job did not end:\n{self.text()[-5000:]}")
        text = self.text()
        assert self.proc.returncode == 0, text[-5000:]
        assert wait_gone([pid for pid, _, _ in self.workers()]) == [], text[-3000:]
        return text

    def check_result(self, size: int) -> None:
        """Every epoch trained once, in order; every rank of the final world holds the same
        variables, the optimizer's included, and ends at the last epoch."""
        assert [r["epoch"] for r in self.epochs_logged()] == list(range(self.epochs)), \
            self.epochs_logged()
        finals = [json.loads((self.out / f"final-{rank}.json").read_text())
                  for rank in range(size)]
        assert [(f["epoch"], f["size"]) for f in finals] == [(self.epochs, size)] * size
        assert finals[0]["optimizer_variables"] > 1  # its step counter and slots were synced
        for other in finals[1:]:
            assert other["optimizer_variables"] == finals[0]["optimizer_variables"]
            assert len(other["variables"]) == len(finals[0]["variables"])
            for mine, theirs in zip(finals[0]["variables"], other["variables"]):
                np.testing.assert_array_equal(np.array(theirs), np.array(mine))


def end_all(jobs) -> None:
    for job in jobs:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


@pytest.fixture(scope="module")
def killed_worker_jobs(tmp_path_factory):
    """The jobs of the test below, side by side: the fixture watches them all and kills each
    one's worker of rank 1 once two of its epochs are logged. Yields each program's job and
    the workers of rank 1 it found then."""
    jobs = {program: Job(tmp_path_factory.mktemp(program), program,
                         ["-np", "2", "--min-np", "1", "--backend", "local"])
            for program in sorted(PROGRAMS)}
    victims = {}
    deadline = time.monotonic() + 240
    try:
        while len(victims) < len(jobs):
            for program, job in jobs.items():
                if program in victims:
                    continue
                if len(job.epochs_logged()) >= 2:
                    victims[program] = [pid for pid, rank, _ in job.workers() if rank == 1]
                    if len(victims[program]) == 1:
                        os.kill(victims[program][0], signal.SIGKILL)
                    continue
                assert job.proc.poll() is None, job.text()[-5000:]
                assert time.monotonic() < deadline, f"no epoch 2:\n{job.text()[-5000:]}"
            time.sleep(0.1)
        yield {program: (job, victims[program]) for program, job in jobs.items()}
    finally:
        end_all(jobs.values())


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_a_killed_worker_started_again_in_place_gets_the_state(killed_worker_jobs, program):
    job, victims = killed_worker_jobs[program]
    assert len(victims) == 1, job.workers()
    text = job.finish()
    assert "(rank 1 of 2) on localhost was killed by SIGKILL" in text, text[-5000:]
    assert "round 2: 2 instance(s) on localhost:2" in text, text[-5000:]
    assert len(job.workers()) == 3  # the new worker of round 2 synced and trained to the end
    job.check_result(size=2)


GROWING = ["keras-state-adam", "horovod-example"]


@pytest.fixture(scope="module")
def growing_jobs(tmp_path_factory):
    """The jobs of the test below, started together: one host until two epochs are logged,
    then two (localhost and 127.0.0.1)."""
    jobs = {}
    for program in GROWING:
        tmp = tmp_path_factory.mktemp(program)
        script = tmp / "discover.sh"
        log = tmp / "out" / "epochs.jsonl"
        script.write_text(f"#!/bin/sh\nif [ \"$(cat {log} 2>/dev/null | wc -l)\" -lt 2 ]; then\n"
                          "  echo localhost:1\nelse\n  printf 'localhost:1\\n127.0.0.1:1\\n'\n"
                          "fi\n")
        script.chmod(0o755)
        jobs[program] = Job(tmp, program, ["-np", "1", "--min-np", "1", "--max-np", "2",
                                           "--host-discovery-script", str(script)])
    yield jobs
    end_all(jobs.values())


@pytest.mark.slow
@pytest.mark.parametrize("program", GROWING)
def test_a_host_added_mid_job_gets_the_state(growing_jobs, program):
    job = growing_jobs[program]
    text = job.finish()
    assert "127.0.0.1 added by the discovery script" in text, text[-5000:]
    sizes = [r["size"] for r in job.epochs_logged()]
    assert sizes[0] == 1 and sizes[-1] == 2, job.epochs_logged()
    assert sorted(host for _, _, host in job.workers()) == ["127.0.0.1", "localhost"]
    job.check_result(size=2)


@pytest.mark.slow
def test_both_tensorflow_states_sync_from_different_starts(tmp_path):
    # Rank 0's optimizer stepped in eager mode (its variables are named Adam/m/...), rank 1's
    # never did: the sync gives rank 1 rank 0's model, optimizer (step counter 1) and values.
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [*LAUNCHER, "-np", "2", "--min-np", "1", "--backend", "local", "--elastic-mode",
         "horovod", "--timeout", "240", sys.executable, str(WORKERS / "elastic_states_sync.py"),
         str(out)], cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    states = [json.loads((out / f"states-{rank}.json").read_text()) for rank in (0, 1)]
    assert states[1] == states[0]
    assert states[0]["model"][0] == [1.0] * 6  # rank 0's kernel (rank 1 started at 2.0)
    assert states[0]["optimizer"][0] == [1] and len(states[0]["optimizer"]) == 5
    assert (states[0]["plain"], states[0]["step"], states[0]["commits"]) == ([0.5] * 4, 10, 3)


# ---- the optimizer build, on real Keras 2 optimizers ------------------------------------------

def trained_and_fresh(make_optimizer):
    """Two identical models: one trained a step by ``make_optimizer()``'s optimizer, one whose
    optimizer has not run (what a worker joining a job holds)."""
    import tensorflow as tf

    models = []
    for _ in range(2):
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        model.compile(loss="mse", optimizer=make_optimizer())
        models.append(model)
    models[0].fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"), verbose=0)
    return models


OPTIMIZERS = {
    "adam": lambda: __import__("tensorflow").keras.optimizers.Adam(0.01),
    "legacy-sgd-momentum": lambda: __import__("tensorflow").keras.optimizers.legacy.SGD(
        0.01, momentum=0.9),
    "legacy-adam": lambda: __import__("tensorflow").keras.optimizers.legacy.Adam(0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_build_creates_what_training_created_and_changes_nothing(name):
    from popdist_launcher.compat.horovod_keras_sync import build_optimizer

    trained, fresh = trained_and_fresh(OPTIMIZERS[name])
    weights = [w.copy() for w in fresh.get_weights()]
    build_optimizer(fresh.optimizer, fresh.trainable_variables)
    done = [(v.shape, v.dtype) for v in trained.optimizer.variables()]
    assert [(v.shape, v.dtype) for v in fresh.optimizer.variables()] == done
    for before, after in zip(weights, fresh.get_weights()):
        np.testing.assert_array_equal(after, before)
    assert int(fresh.optimizer.iterations.numpy()) == 0
    # A built optimizer keeps its variables and their values.
    values = [np.array(v.numpy()) for v in trained.optimizer.variables()]
    build_optimizer(trained.optimizer, trained.trainable_variables)
    assert len(trained.optimizer.variables()) == len(values)
    for value, var in zip(values, trained.optimizer.variables()):
        np.testing.assert_array_equal(var.numpy(), value)
