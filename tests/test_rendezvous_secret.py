"""The Gloo rendezvous store answers only requests that carry the job's secret: a local process
without it can neither read nor write (nor poison the rank addresses), and real Horovod
instances that have it in HOROVOD_GLOO_RENDEZVOUS_ADDR still rendezvous and allreduce.

The server runs as the launcher starts it (python -m popdist_launcher.wire.rendezvous on an
inherited listening socket, the secret in its environment), and inside a real poprun-lite job."""
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import poprun
from popdist_launcher.launcher.layout import ports
from popdist_launcher.wire import rendezvous

ROOT = Path(__file__).resolve().parent.parent
SIZE = 2

WORKER = """
import json
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "sum": total.numpy().tolist()}))
"""


@pytest.fixture
def server():
    """(port, secret) of a rendezvous server for a 2-instance job on localhost."""
    sock = ports.listen_socket("127.0.0.1")
    port = sock.getsockname()[1]
    secret = rendezvous.new_secret()
    slots = [{"hostname": "localhost", "rank": r, "size": SIZE, "local_rank": r,
              "local_size": SIZE, "cross_rank": 0, "cross_size": 1} for r in range(SIZE)]
    env = dict(os.environ, **{rendezvous.SECRET_ENV: secret})
    proc = subprocess.Popen(
        [sys.executable, "-m", "popdist_launcher.wire.rendezvous", str(sock.fileno()),
         json.dumps(slots), json.dumps(["127.0.0.1"])],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, pass_fds=(sock.fileno(),))
    sock.close()
    try:
        yield port, secret
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def request(port: int, method: str, path: str, body: bytes = None):
    """(status, body) of one HTTP request; retried while the server imports Horovod."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_requests_without_the_secret_are_refused(server):
    port, secret = server
    good = f"/{secret}:{port}"
    wrong = f"/{rendezvous.new_secret()}:{port}"
    assert request(port, "PUT", "/global_/0", b"poison")[0] == 403
    assert request(port, "PUT", f"{wrong}/global_/0", b"poison")[0] == 403
    assert request(port, "PUT", f"/{secret}/global_/0", b"poison")[0] == 403  # no port part
    assert request(port, "PUT", f"/{secret[:-1]}:{port}/global_/0", b"poison")[0] == 403
    assert request(port, "GET", "/global_/0")[0] == 403
    assert request(port, "DELETE", "/global_/0")[0] == 403
    assert request(port, "HEAD", "/")[0] == 403  # Horovod's handler would serve the cwd's files
    # None of that reached the store; the job's own requests work.
    assert request(port, "GET", f"{good}/global_/0")[0] == 404
    assert request(port, "PUT", f"{good}/global_/0", b"rank 0")[0] == 200
    assert request(port, "GET", f"{good}/global_/0") == (200, b"rank 0")
    assert request(port, "PUT", "/global_/0", b"poison")[0] == 403
    assert request(port, "GET", f"{good}/global_/0") == (200, b"rank 0")


def test_horovod_instances_with_the_secret_rendezvous_and_allreduce(server):
    port, secret = server
    # A local process without the secret tries to plant rank addresses first: refused.
    for rank in range(SIZE):
        assert request(port, "PUT", f"/global_/rank_{rank}", b"127.0.0.1:1")[0] == 403
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "PMIX_"))}
    workers = []
    for rank in range(SIZE):
        env = dict(base, TF_CPP_MIN_LOG_LEVEL="2", HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(SIZE),
                   HOROVOD_LOCAL_RANK=str(rank), HOROVOD_LOCAL_SIZE=str(SIZE),
                   HOROVOD_CROSS_RANK="0", HOROVOD_CROSS_SIZE="1", HOROVOD_HOSTNAME="localhost",
                   HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
                   HOROVOD_GLOO_IFACE="lo", HOROVOD_GLOO_TIMEOUT_SECONDS="120",
                   HOROVOD_GLOO_RENDEZVOUS_ADDR=rendezvous.client_address("127.0.0.1", port,
                                                                          secret),
                   HOROVOD_GLOO_RENDEZVOUS_PORT=str(port))
        workers.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for worker in workers:
        try:
            out, err = worker.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for w in workers:
                w.kill()
            pytest.fail("hvd.init() with the secret did not finish")
        assert worker.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results == [{"rank": r, "size": SIZE, "sum": [3.0]} for r in range(SIZE)]


def test_the_server_refuses_to_start_without_a_secret():
    sock = ports.listen_socket("127.0.0.1")
    env = {k: v for k, v in os.environ.items() if k != rendezvous.SECRET_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "popdist_launcher.wire.rendezvous", str(sock.fileno()), "[]", "[]"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, pass_fds=(sock.fileno(),),
        capture_output=True, text=True, timeout=120)
    sock.close()
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "poprun-lite rendezvous: $POPRUN_RENDEZVOUS_SECRET must hold the job's secret (at least "
        "32 characters); the launcher sets it.")


OUTSIDER_THEN_TRAIN = """
import http.client, json, os, sys
port = int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
def put(path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("PUT", path, body=b"127.0.0.1:1")
    return conn.getresponse().status
# What any local process could try: write the rank addresses without the secret.
refused = [put(f"/global_/rank_{r}") for r in range(2)]
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
secret = os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"].split("/", 1)[1]
with open(os.path.join(sys.argv[1], f"instance-{hvd.rank()}.json"), "w") as f:
    json.dump({"refused": refused, "sum": total.numpy().tolist(), "secret": secret}, f)
"""


def test_a_poprun_job_refuses_outsiders_and_still_trains(tmp_path):
    script = tmp_path / "outsider_then_train.py"
    script.write_text(OUTSIDER_THEN_TRAIN)
    result = poprun("-np", "2", "--backend", "local", str(script), str(tmp_path), timeout=300,
                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((tmp_path / f"instance-{r}.json").read_text()) for r in range(2)]
    for record in records:
        assert record["refused"] == [403, 403] and record["sum"] == [3.0]
        assert len(record["secret"]) == 32 and int(record["secret"], 16) >= 0
    assert records[0]["secret"] == records[1]["secret"]  # one secret per attempt of the job
