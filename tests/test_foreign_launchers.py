"""The library recognises who started it without poprun-lite: Open MPI's mpirun, PMI launchers
(MPICH/Intel MPI hydra, srun --mpi=pmi2), torchrun-style variables, a TF_CONFIG alone (Kubeflow
TFJob, Ray Train). Recorded environments give the expected place; real jobs started by mpirun,
by torchrun-style variables and by a TF_CONFIG train to the weights of one process."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import PROGRAMS
from popdist_launcher import runtime
from popdist_launcher.launcher.layout.backends.detect import find_mpirun

RECORDED = Path(__file__).parent / "data" / "slurm"
TRAIN = str(PROGRAMS / "foreign_launch_train.py")
REFERENCE = str(Path(__file__).parent / "workers" / "train_equivalence.py")

# Recorded on this machine from `mpirun -np 4` (rank 3; two ranks per host shown as Open MPI
# numbers them), less the PMIx plumbing the library never reads.
OPEN_MPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_UNIVERSE_SIZE": "4", "PMIX_RANK": "3",
            "PMIX_NAMESPACE": "prterun-vm-15548@1", "PRTE_LAUNCHED": "1"}
# MPICH / Intel MPI hydra (mpiexec -n 4 -ppn 2): rank 2 is the first on the second host.
HYDRA = {"PMI_RANK": "2", "PMI_SIZE": "4", "PMI_FD": "6", "MPI_LOCALRANKID": "0",
         "MPI_LOCALNRANKS": "2", "HYDI_CONTROL_FD": "5"}
# srun --mpi=pmi2 -n 4 (task 3): Slurm's task variables plus those of its pmi2 plugin.
SRUN_PMI2 = {**json.loads((RECORDED / "srun-task3.json").read_text()),
             "PMI_FD": "11", "PMI_JOBID": "7.0", "PMI_RANK": "3", "PMI_SIZE": "4"}
# torchrun --nnodes 2 --nproc-per-node 2 --rdzv-endpoint node0:29500: worker 3 (node 1).
TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "ROLE_NAME": "default",
            "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3",
            "TORCHELASTIC_RUN_ID": "job42", "TORCHELASTIC_USE_AGENT_STORE": "False",
            "OMP_NUM_THREADS": "1"}
# Kubeflow TFJob with a chief and two workers: worker 1.
TFJOB = {"TF_CONFIG": json.dumps({
    "cluster": {"chief": ["mnist-chief-0.ns.svc:2222"],
                "worker": ["mnist-worker-0.ns.svc:2222", "mnist-worker-1.ns.svc:2222"]},
    "task": {"type": "worker", "index": 1}, "environment": "cloud"})}
# Ray Train's TensorflowTrainer: workers only, two on the first host.
RAY = {"TF_CONFIG": json.dumps({
    "cluster": {"worker": ["10.0.0.1:41000", "10.0.0.1:41001", "10.0.0.2:41000"]},
    "task": {"type": "worker", "index": 1}})}
EVALUATOR = {"TF_CONFIG": json.dumps({
    "cluster": {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001"]},
    "task": {"type": "evaluator", "index": 0}})}


def place(env):
    ctx = runtime.context_from_environ(env)
    return (ctx.launcher, ctx.launched, ctx.num_instances, ctx.instance_index,
            ctx.local_instance_index, ctx.num_total_replicas, ctx.num_local_replicas,
            ctx.replica_index_offset, ctx.restart_count)


@pytest.mark.parametrize("env, expected", [
    (OPEN_MPI, ("mpirun", True, 4, 3, 1, 4, 1, 3, 0)),
    (HYDRA, ("PMI", True, 4, 2, 0, 4, 1, 2, 0)),
    (SRUN_PMI2, ("PMI", True, 4, 3, 3, 4, 1, 3, 0)),
    (TORCHRUN, ("torchrun", True, 4, 3, 1, 4, 1, 3, 1)),
    (TFJOB, ("TF_CONFIG", True, 3, 2, 0, 3, 1, 2, 0)),
    (RAY, ("TF_CONFIG", True, 3, 1, 1, 3, 1, 1, 0)),
    (json.loads((RECORDED / "srun-task3.json").read_text()), ("srun", True, 4, 3, 3, 4, 1, 3, 0)),
], ids=["open-mpi", "hydra", "srun-pmi2", "torchrun", "tfjob", "ray", "srun"])
def test_each_launcher_gives_the_place_it_means(env, expected):
    assert place(env) == expected


@pytest.mark.parametrize("env", [
    EVALUATOR,
    {**EVALUATOR, **json.loads((RECORDED / "srun-task3.json").read_text())},  # inherited
    {"TF_CONFIG": json.dumps({"cluster": {"ps": ["h:1"], "worker": ["h:2", "h:3"]},
                              "task": {"type": "ps", "index": 0}})},
], ids=["evaluator", "evaluator-in-slurm-step", "ps"])
def test_an_evaluator_or_ps_task_is_not_a_training_instance(env):
    assert runtime.context_from_environ(env) == runtime.SINGLE_INSTANCE


@pytest.mark.parametrize("env, launcher", [
    ({**OPEN_MPI, "POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "1",
      "POPDIST_REPLICA_INDEX_OFFSET": "3", "POPDIST_NUM_INSTANCES": "4",
      "POPDIST_INSTANCE_INDEX": "3"}, "poprun-lite"),  # poprun-lite's mpi backend
    ({**TORCHRUN, **json.loads((RECORDED / "srun-task3.json").read_text())}, "torchrun"),
    ({**OPEN_MPI, **json.loads((RECORDED / "srun-task3.json").read_text())}, "mpirun"),
    ({**RAY, **json.loads((RECORDED / "srun-task3.json").read_text())}, "TF_CONFIG"),
], ids=["poprun-lite-over-mpirun", "torchrun-under-srun", "mpirun-in-slurm", "ray-on-slurm"])
def test_the_launcher_that_started_the_process_wins_over_the_one_around_it(env, launcher):
    assert runtime.context_from_environ(env).launcher == launcher


@pytest.mark.parametrize("env, words", [
    ({**TORCHRUN, "HOROVOD_RANK": "0", "HOROVOD_SIZE": "4"},
     "HOROVOD_RANK=0 and HOROVOD_SIZE=4 disagree with RANK/WORLD_SIZE (instance 3 of 4)"),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "2", "POPDIST_NUM_LOCAL_REPLICAS": "1",
      "POPDIST_REPLICA_INDEX_OFFSET": "1", "HOROVOD_RANK": "1", "HOROVOD_SIZE": "4"},
     "disagree with the POPDIST_* variables"),
    ({**OPEN_MPI, **RAY}, "TF_CONFIG makes this process training task 1 of 3 but "
                          "OMPI_COMM_WORLD_RANK/SIZE make it instance 3 of 4"),
    ({**TORCHRUN, "RANK": "4"}, "RANK=4 is out of range for WORLD_SIZE=4"),
    ({**TORCHRUN, "LOCAL_RANK": "2"}, "LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2"),
    ({**HYDRA, "MPI_LOCALRANKID": "first"}, "MPI_LOCALRANKID='first' is not an integer"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}'},
     "TF_CONFIG task index 3 is out of range"),
])
def test_launch_variables_that_cannot_be_right_get_one_sentence(env, words):
    with pytest.raises(runtime.LaunchEnvironmentError, match=re.escape(words)) as error:
        runtime.context_from_environ(env)
    message = str(error.value)
    assert message.endswith(".") and "\n" not in message and message.count("; ") <= 2


def test_torchrun_and_tf_config_say_where_the_rendezvous_lives():
    torch = runtime.foreign_launch(TORCHRUN)
    assert torch.rendezvous == ("node0", 29501) and torch.node_of_rank == (0, 0, 1, 1)
    tfjob = runtime.foreign_launch(TFJOB)
    assert tfjob.rendezvous == ("mnist-chief-0.ns.svc", 2223) and tfjob.node_of_rank == (0, 1, 2)
    ray = runtime.foreign_launch(RAY)  # 41001 is a task's port on that host: the next one
    assert ray.rendezvous == ("10.0.0.1", 41002) and ray.node_of_rank == (0, 0, 1)
    assert runtime.foreign_launch(HYDRA).rendezvous is None


# ---- Horovod's wiring (collectives/_bootstrap.py) ----------------------------------------------

@pytest.fixture
def bootstrap():
    from popdist_launcher.collectives import _bootstrap

    yield _bootstrap
    runtime.init({})


def free_port_pair():
    """A port P with P+1 also free (torchrun's MASTER_PORT and our rendezvous), on loopback."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two consecutive free ports on loopback")


def test_layout_matches_horovodrun_for_uneven_hosts(bootstrap):
    slots = bootstrap.layout([0, 0, 1])
    got = [(s["hostname"], s["local_rank"], s["local_size"], s["cross_rank"], s["cross_size"])
           for s in slots]
    assert got == [("node0", 0, 2, 0, 2), ("node0", 1, 2, 0, 1), ("node1", 0, 1, 1, 2)]


def test_torchrun_instance_gets_what_hvd_init_needs_for_gloo(bootstrap):
    port = free_port_pair()
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_RUN_ID": "run-a"}
    given = dict(env)
    with socket.create_server(("127.0.0.1", port + 1)):  # instance 0's rendezvous
        runtime.init(env)
        assert bootstrap.prepare(env) is None  # only instance 0 serves
    secret = env["HOROVOD_GLOO_RENDEZVOUS_ADDR"].split("/")[1]
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == f"127.0.0.1:{port + 1}/{secret}"
    assert re.fullmatch("[0-9a-f]{32}", secret)
    horovod = {k: v for k, v in env.items() if k.startswith("HOROVOD_")}
    del horovod["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
    assert horovod == {
        "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_HOSTNAME": "node0", "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port + 1), "HOROVOD_GLOO_TIMEOUT_SECONDS": "120",
        "HOROVOD_GLOO_IFACE": "lo"}
    # Every instance of the job derives the same secret; another job, or a user's own, differs.
    same_job = runtime.foreign_launch({**given, "RANK": "0", "LOCAL_RANK": "0"})
    assert bootstrap._secret({}, same_job, ("127.0.0.1", port + 1)) == secret
    other_job = runtime.foreign_launch({**given, "TORCHELASTIC_RUN_ID": "run-b"})
    assert bootstrap._secret({}, other_job, ("127.0.0.1", port + 1)) != secret
    address = ("127.0.0.1", port + 1)
    users = bootstrap._secret({"POPDIST_RENDEZVOUS_SECRET": "s3"}, same_job, address)
    assert users not in (secret,
                         bootstrap._secret({"POPDIST_RENDEZVOUS_SECRET": "s4"}, same_job, address))


def test_instance_0_serves_the_rendezvous_only_to_requests_with_the_secret(bootstrap):
    import http.client

    port = free_port_pair()
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "localhost", "MASTER_PORT": str(port)}
    runtime.init(env)
    server = bootstrap.prepare(env)
    try:
        secret = env["HOROVOD_GLOO_RENDEZVOUS_ADDR"].split("/")[1]

        def get(path):
            conn = http.client.HTTPConnection("127.0.0.1", port + 1, timeout=30)
            try:
                conn.request("GET", path)
                return conn.getresponse().status
            finally:
                conn.close()

        assert get("/global/0") == 403  # Horovod's own server would answer anyone
        assert get(f"/{'0' * 32}:{port + 1}/global/0") == 403
        assert get(f"/{secret}:{port + 1}/global/0") == 404  # in: no such key yet
    finally:
        server.stdin.close()  # as when instance 0 exits
        assert server.wait(timeout=30) == 0


def test_the_rendezvous_address_variable_wins(bootstrap):
    port = free_port_pair()
    env = {**TORCHRUN, "RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0",
           "POPDIST_RENDEZVOUS_ADDR": f"127.0.0.1:{port}"}
    with socket.create_server(("127.0.0.1", port)):
        runtime.init(env)
        bootstrap.prepare(env)
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"].startswith(f"127.0.0.1:{port}/")


@pytest.mark.parametrize("env", [
    OPEN_MPI,  # MPI wires Horovod
    {**TORCHRUN, "HOROVOD_CONTROLLER": "gloo"},  # Horovod already told
    {**EVALUATOR},
    {"RANK": "0", "WORLD_SIZE": "1"},
], ids=["open-mpi", "horovod-variables-set", "evaluator", "one-instance"])
def test_nothing_is_set_where_horovod_needs_no_help(bootstrap, env):
    env = dict(env)
    before = dict(env)
    runtime.init(env)
    assert bootstrap.prepare(env) is None and env == before


def test_a_pmi_launch_without_an_address_names_the_variable_to_set(bootstrap):
    env = dict(HYDRA)
    runtime.init(env)
    with pytest.raises(runtime.LaunchEnvironmentError,
                       match=re.escape("started by PMI (PMI_RANK/PMI_SIZE) as instance 2 of 4, "
                                       "which gives Horovod's Gloo rendezvous no address; set "
                                       "POPDIST_RENDEZVOUS_ADDR=")):
        bootstrap.prepare(env)
    assert "HOROVOD_RANK" not in env


def test_an_unreachable_rendezvous_fails_within_the_gloo_timeout(bootstrap):
    port = free_port_pair()  # nothing listens there
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "HOROVOD_GLOO_TIMEOUT_SECONDS": "1"}
    runtime.init(env)
    with pytest.raises(runtime.LaunchEnvironmentError,
                       match=re.escape(f"instance 1 could not reach Horovod's rendezvous at "
                                       f"127.0.0.1:{port + 1} (from MASTER_ADDR and "
                                       f"MASTER_PORT+1) within 1 s")):
        bootstrap.prepare(env)


# ---- real jobs without poprun-lite -------------------------------------------------------------

LAUNCH_VARIABLES = re.compile(r"^(POPDIST_|POPRUN_|HOROVOD_|OMPI_|PMIX_|PMI_|SLURM_|TORCHELASTIC_)"
                              r"|^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|"
                              r"MASTER_ADDR|MASTER_PORT|TF_CONFIG)$")


def clean_env(**extra):
    """This environment without any launcher's variables, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not LAUNCH_VARIABLES.search(k)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return {**env, **extra}


def run_together(commands, timeout=240):
    """Start each (argv, env) in its own process group; wait for all, bounded; kill the groups
    of any still running at the timeout or when one fails. Returns the (code, stderr) pairs."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for argv, env in commands]
    deadline = time.monotonic() + timeout
    results = []
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
            results.append((proc.returncode, err))
            if proc.returncode != 0:
                break
    except subprocess.TimeoutExpired:
        results.append((None, "timed out"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    return results


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One plain process on the whole global batch."""
    out = tmp_path_factory.mktemp("reference")
    [(code, err)] = run_together([([sys.executable, REFERENCE, "reference", "none", str(out)],
                                   clean_env())])
    assert code == 0, err[-3000:]
    return json.loads((out / "reference-0.json").read_text())["history"]


def assert_trained_like_one_process(out, reference, launcher, horovod=None):
    for i in range(2):
        identity = json.loads((out / f"identity-{i}.json").read_text())
        assert identity.pop("horovod", None) == (horovod(i) if horovod else None)
        assert identity == {"launcher": launcher, "is_set": True, "instances": 2, "index": i,
                            "local_index": i, "total_replicas": 2, "local_replicas": 1,
                            "offset": i}
    histories = [json.loads((out / f"tf2-{i}.json").read_text())["history"] for i in range(2)]
    assert len(histories[0]) == len(reference) == 4
    for step, (a, b, ref) in enumerate(zip(*histories, reference)):
        assert a == b, f"instances differ after step {step}"
        np.testing.assert_allclose(a, ref, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")


def check_codes(results):
    for code, err in results:
        assert code == 0, err[-4000:]


@pytest.mark.slow
def test_plain_mpirun_trains_with_horovod_over_mpi(tmp_path, reference):
    argv = [find_mpirun(), "-np", "2", "--oversubscribe", "--bind-to", "none",
            "--mca", "mpi_yield_when_idle", "1"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    check_codes(run_together([(argv + [sys.executable, TRAIN, "tf2", "popdist", str(tmp_path)],
                               clean_env())]))
    assert_trained_like_one_process(
        tmp_path, reference, "mpirun",
        lambda i: {"rank": i, "size": 2, "local_rank": i, "mpi": True, "gloo": False})


@pytest.mark.slow
def test_torchrun_variables_train_with_gloo_served_by_instance_0(tmp_path, reference):
    port = free_port_pair()
    check_codes(run_together([
        ([sys.executable, TRAIN, "tf2", "popdist", str(tmp_path)],
         clean_env(RANK=str(i), WORLD_SIZE="2", LOCAL_RANK=str(i), LOCAL_WORLD_SIZE="2",
                   GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TORCHELASTIC_RUN_ID="foreign-test", HOROVOD_GLOO_TIMEOUT_SECONDS="60"))
        for i in range(2)]))
    assert_trained_like_one_process(
        tmp_path, reference, "torchrun",
        lambda i: {"rank": i, "size": 2, "local_rank": i, "mpi": False, "gloo": True})


def tf_config_cluster(jobs):
    """Loopback TF_CONFIG cluster of free ports: jobs = [(type, count), ...]."""
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(sum(n for _, n in jobs))]
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    cluster, k = {}, 0
    for kind, n in jobs:
        cluster[kind] = [f"127.0.0.1:{p}" for p in ports[k:k + n]]
        k += n
    return cluster


@pytest.mark.slow
@pytest.mark.parametrize("strategy, tasks", [
    ("multi-worker", [("chief", 0), ("worker", 0)]),  # TFJob's shape: IPUMultiWorkerStrategy
    ("popdist", [("worker", 0), ("worker", 1)]),  # Ray's shape: PopDistStrategy through Gloo
])
def test_tf_config_alone_trains(tmp_path, reference, strategy, tasks):
    cluster = tf_config_cluster([("chief", 1), ("worker", 1)] if tasks[0][0] == "chief"
                                else [("worker", 2)])
    check_codes(run_together([
        ([sys.executable, TRAIN, "tf2", strategy, str(tmp_path)],
         clean_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": i}}),
                   HOROVOD_GLOO_TIMEOUT_SECONDS="60"))
        for kind, i in tasks]))
    assert_trained_like_one_process(
        tmp_path, reference, "TF_CONFIG",
        None if strategy == "multi-worker" else
        lambda i: {"rank": i, "size": 2, "local_rank": i, "mpi": False, "gloo": True})
