"""The progress reports the library makes under poprun-lite (popdist_launcher.report_progress,
tf.train.CheckpointManager.save, the IPUEstimator's global step), read where the wrapper reads
them: this test plays the wrapper (the program's parent, holding the other end of its stack
pipe), with real TensorFlow, and checks every report that arrives."""
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

ESTIMATOR = """
import numpy as np
import tensorflow as tf
from popdist_launcher import ipu

x = np.ones((8, 2), "float32")
def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", initializer=[[0.0], [0.0]], use_resource=True)
    loss = tf.reduce_mean((tf.matmul(features, w) - labels) ** 2)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)
def input_fn(params):
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(params["batch_size"]).repeat()
config = ipu.ipu_run_config.RunConfig(
    ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=2),
    model_dir=MODEL_DIR, save_checkpoints_steps=10 ** 6, save_summary_steps=0,
    log_step_count_steps=None)
ipu.ipu_estimator.IPUEstimator(model_fn, config=config, train_batch_size=4).train(input_fn,
                                                                                  steps=6)
"""

CHECKPOINTS = """
import tensorflow as tf
checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
manager = tf.train.CheckpointManager(checkpoint, MODEL_DIR, max_to_keep=2)
manager.save(checkpoint_number=7)
manager.save(checkpoint_number=9)
"""

DIRECT = """
import popdist_launcher
popdist_launcher.report_progress(3)
popdist_launcher.report_progress(4)
"""


def reports(tmp_path, code: str):
    """Run ``code`` as the wrapper's program would run; the steps it reported."""
    read, write = os.pipe()
    env = {**os.environ, "POPRUN_STACK_FD": f"{write}:{os.getpid()}:{int(signal.SIGUSR2)}",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    program = f"MODEL_DIR = {str(tmp_path / 'model')!r}\n" + textwrap.dedent(code)
    proc = subprocess.Popen([sys.executable, "-c", program], pass_fds=(write,), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert data.startswith(b"\0ready\n"), data[:200]
    return [int(n) for n in re.findall(rb"\0progress (\d+)\n", data)]


def test_a_program_reports_its_progress(tmp_path):
    assert reports(tmp_path, DIRECT) == [3, 4]


@pytest.mark.slow
def test_a_checkpoint_manager_reports_each_checkpoint_number(tmp_path):
    assert reports(tmp_path, CHECKPOINTS) == [7, 9]


@pytest.mark.slow
def test_an_ipu_estimator_reports_its_global_step_after_every_run(tmp_path):
    assert reports(tmp_path, ESTIMATOR) == [2, 4, 6]
