"""The peer side by side: the same unmodified Horovod elastic Keras program, on the same two
namespace hosts with the same discovery script, under ``horovodrun`` and under ``poprun-lite``:
hostB's worker is killed mid-training, hostB comes back after its blacklist cooldown, and both
jobs end with the weights the committed steps say (tests/elastic_peer.py says how horovodrun is
made to run on the test hosts)."""
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import elastic_peer as peer
from netns_hosts import TestHosts, require_test_hosts

sys.path.insert(0, str(Path(__file__).parent / "workers"))
from elastic_reference import keras_reference  # noqa: E402

pytestmark = pytest.mark.slow
WORKER = Path(__file__).parent / "workers" / "elastic_keras.py"
EPOCHS, STEPS, COMMIT = "6", "10", "4"


def run_and_kill(hosts, launcher: str, tmp: Path) -> dict:
    """Start the job, kill hostB's worker at step 12, let hostB return; the job's result."""
    tmp.mkdir()
    pids, out = tmp / "pids", tmp / "weights.json"
    pids.mkdir()
    listing = tmp / "hosts.txt"
    peer.write_hosts_file(listing, [("hostA", 1), ("hostB", 1)])
    script = peer.write_discovery_script(tmp, listing)
    variables = {"ELASTIC_PID_DIR": str(pids), "ELASTIC_STEP_SLEEP": "0.1",
                 "HOROVOD_GLOO_TIMEOUT_SECONDS": "30"}
    program = [sys.executable, str(WORKER), str(out), EPOCHS, STEPS, COMMIT]
    if launcher == "horovodrun":
        argv = peer.horovodrun_argv(hosts, "hostC", script, program, np=2, min_np=1, max_np=2)
        env = peer.horovodrun_env(peer.write_ssh_wrapper(hosts, tmp / "bin"), variables)
    else:
        argv = peer.poprun_lite_argv(hosts, script, program, np=2, min_np=1, max_np=2,
                                     variables=variables)
        env = dict(os.environ)
    job = peer.Launch(argv, tmp / "console.txt", env, cwd=Path(__file__).parent.parent)
    try:
        assert job.wait_for(lambda: any(s.n >= 12 and s.size == 2 for s in job.steps()), 240), \
            job.text()[-4000:]
        on_b = set(hosts.pids_in("hostB", include_sshd_sessions=False))
        victims = [int(p.name.rsplit("-", 1)[1]) for p in pids.iterdir()]
        victims = [p for p in victims if p in on_b]
        assert len(victims) == 1, (victims, on_b)
        moment = time.time()
        os.kill(victims[0], signal.SIGKILL)
        code = job.wait(300)
    finally:
        if job.running():
            job.stop()
        left = peer.end_leftovers(hosts, ("hostA", "hostB", "hostC"))
    text = job.text()
    assert code == 0, text[-5000:]
    assert left == {}, left
    after = [s for s in peer.steps(text) if s.t > moment]
    small = next(s for s in after if s.size == 1)
    back = next(s for s in after if s.size == 2 and s.t > small.t)
    result = json.loads(out.read_text())
    return {"result": result, "recovery": small.t - moment, "back": back.t - moment}


def test_the_same_elastic_program_under_horovodrun_and_poprun_lite(tmp_path):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB", "hostC"), workdir=tmp_path) as hosts:
        ours = run_and_kill(hosts, "poprun-lite", tmp_path / "ours")
        theirs = run_and_kill(hosts, "horovodrun", tmp_path / "theirs")
    for name, run in (("poprun-lite", ours), ("horovodrun", theirs)):
        result = run["result"]
        want = keras_reference(result["step"])
        np.testing.assert_allclose(result["kernel"], want["kernel"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(result["bias"], want["bias"], rtol=0, atol=1e-9)
        assert result["epoch"] == int(EPOCHS) and result["step"] >= int(EPOCHS) * int(STEPS)
        print(f"{name}: next step {run['recovery']:.2f} s after the kill, back to 2 workers "
              f"{run['back']:.2f} s after it")
