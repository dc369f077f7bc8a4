"""CPU placement and GPUs per instance: the pure decisions of placement.py on fake /sys, /proc
and /dev trees, then --bind-to, --numa-aware, the thread budget and --report-bindings through the
real CLI on the local, mpi and ssh backends (the program reports what it really got), and
TensorFlow's thread pools following the budget."""
import json
import os
import re

import pytest

from conftest import poprun
from netns_hosts import TestHosts, require_test_hosts
from popdist_launcher.launcher.layout.backends.base import Wiring
from popdist_launcher.launcher.layout.backends.mpi import MpiBackend
from popdist_launcher.launcher.layout.backends.slurm import SlurmBackend
from popdist_launcher.launcher.layout.hosts import HostSlots
from popdist_launcher.launcher.layout.plan import Host, build_plan
from popdist_launcher.launcher.spawned import placement
from popdist_launcher.wire import placement_text

THREADS = placement.THREAD_VARS
PROBE = """
import json, os, sys
print("PROBE " + json.dumps({
    "index": int(os.environ["POPDIST_INSTANCE_INDEX"]),
    "local": int(os.environ["POPDIST_LOCAL_INSTANCE_INDEX"]),
    "host": os.uname().nodename,
    "cpus": sorted(os.sched_getaffinity(0)),
    "env": {k: os.environ.get(k) for k in %r},
    "placement_seen": "POPRUN_PLACEMENT" in os.environ,
}))
""" % (THREADS + ("CUDA_VISIBLE_DEVICES",),)
REPORT = re.compile(r"^\[(\d+)\]<stderr>:poprun-lite: instance (\d+) on host (\S+): CPUs (\S+) "
                    r"\(([^)]*)\), NUMA nodes? (\S+), threads: intra-op (.+), inter-op (.+), "
                    r"OMP (.+)$", re.M)


# ---- the pure decisions -------------------------------------------------------------------
def write(root, path, text):
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


@pytest.fixture
def two_socket_host(tmp_path):
    """8 CPUs: 4 cores with 2 hyperthreads each (siblings N and N+4), 2 NUMA nodes, a
    memory-only node 2, and 4 NVIDIA GPUs."""
    for cpu in range(8):
        write(tmp_path, f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list",
              f"{cpu % 4},{cpu % 4 + 4}\n")
    write(tmp_path, "sys/devices/system/node/node0/cpulist", "0-1,4-5\n")
    write(tmp_path, "sys/devices/system/node/node1/cpulist", "2-3,6-7\n")
    write(tmp_path, "sys/devices/system/node/node2/cpulist", "\n")
    write(tmp_path, "sys/devices/system/node/possible", "0-2\n")
    for bus in ("0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0", "0000:af:00.0"):
        write(tmp_path, f"proc/driver/nvidia/gpus/{bus}/information", "Device Minor: 0\n")
    return tmp_path


def test_cpulists_parse_and_print():
    assert placement.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert placement.parse_cpulist("\n") == []
    assert placement.format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert placement.format_cpulist([5]) == "5"


def test_core_blocks_keep_hyperthreads_together(two_socket_host):
    cores = placement.physical_cores(range(8), two_socket_host)
    assert cores == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [placement.core_block(cores, j, 2) for j in range(2)] == [([0, 4, 1, 5], 1),
                                                                     ([2, 6, 3, 7], 1)]
    assert [placement.core_block(cores, j, 3)[0] for j in range(3)] == [[0, 4], [1, 5],
                                                                        [2, 6, 3, 7]]
    # More instances than cores: round-robin, and the budget counts who shares.
    shared = [placement.core_block(cores[:2], j, 5) for j in range(5)]
    assert shared == [([0, 4], 3), ([1, 5], 2), ([0, 4], 3), ([1, 5], 2), ([0, 4], 3)]
    # Without topology files each CPU is its own core; only allowed CPUs count.
    assert placement.physical_cores([2, 3, 9], two_socket_host / "nothing") == [[2], [3], [9]]
    assert placement.physical_cores([0, 1, 2], two_socket_host) == [[0], [1], [2]]


def test_numa_nodes_round_robin(two_socket_host):
    nodes = placement.numa_nodes(range(8), two_socket_host)
    assert nodes == [(0, [0, 1, 4, 5]), (1, [2, 3, 6, 7])]  # node 2 has no CPU
    assert placement.numa_nodes([1, 2, 3], two_socket_host) == [(0, [1]), (1, [2, 3])]
    assert placement.numa_nodes([6, 7], two_socket_host) == [(1, [6, 7])]
    assert placement.numa_nodes([0, 1], two_socket_host / "nothing") == [(0, [0, 1])]
    blocks = [placement.numa_block(nodes, j, 3) for j in range(3)]
    assert blocks == [(0, [0, 1, 4, 5], 2), (1, [2, 3, 6, 7], 1), (0, [0, 1, 4, 5], 2)]
    assert placement.thread_budget(4, 2) == 2 and placement.thread_budget(2, 3) == 1


def test_host_gpus_from_cuda_visible_devices_or_the_device_tree(two_socket_host, tmp_path):
    assert placement.host_gpus({}, two_socket_host) == ["0", "1", "2", "3"]
    uuids = "GPU-8f2c1a7e-1111,GPU-0b9d4c3a-2222, GPU-77aa-3333"
    assert placement.host_gpus({"CUDA_VISIBLE_DEVICES": uuids}, two_socket_host) == \
        ["GPU-8f2c1a7e-1111", "GPU-0b9d4c3a-2222", "GPU-77aa-3333"]
    assert placement.host_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, two_socket_host) == []
    assert placement.host_gpus({"CUDA_VISIBLE_DEVICES": ""}, two_socket_host) == []
    dev = tmp_path / "dev-only"
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        write(dev, f"dev/{name}", "")
    assert placement.host_gpus({}, dev) == ["0", "1"]
    assert placement.host_gpus({}, tmp_path / "no-gpu") == []


def test_gpu_blocks_one_per_local_replica_or_shared_round_robin():
    gpus = ["0", "1", "2", "3"]
    assert [placement.gpu_block(gpus, j, 2, 2) for j in range(2)] == [(["0", "1"], False),
                                                                      (["2", "3"], False)]
    assert [placement.gpu_block(gpus, j, 4, 1)[0] for j in range(4)] == [["0"], ["1"], ["2"],
                                                                         ["3"]]
    assert [placement.gpu_block(gpus[:3], j, 2, 2) for j in range(2)] == [(["0", "1"], True),
                                                                          (["2", "0"], True)]
    assert placement.gpu_block(["7"], 1, 2, 2) == (["7"], True)


def placed(root, options, local, size, replicas=1, env=None, allowed=range(8), index=None):
    text = placement_text.for_instance(options, local if index is None else index, local, size,
                                  replicas)
    return placement.place(text, env or {}, allowed, root, host="nodeA")


def test_place_numa_with_gpus_and_report(two_socket_host):
    options = placement_text.encode("numa", True, "auto", True)
    result = [placed(two_socket_host, options, j, 4, replicas=1) for j in range(4)]
    assert [r.cpus for r in result] == [[0, 1, 4, 5], [2, 3, 6, 7]] * 2
    assert result[1].env == {"OMP_NUM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2",
                             "TF_NUM_INTEROP_THREADS": "2", "CUDA_VISIBLE_DEVICES": "1",
                             "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert result[3].report == ("poprun-lite: instance 3 on host nodeA: CPUs 2-3,6-7 (bind-to "
                                "numa), NUMA node 1, threads: intra-op 2, inter-op 2, OMP 2, "
                                "GPUs 3 (CUDA_VISIBLE_DEVICES)")
    assert all(r.notes == [] for r in result)


def test_place_leaves_what_the_user_set(two_socket_host):
    options = placement_text.encode("core", True, "auto", True)
    user = {"OMP_NUM_THREADS": "3", "TF_FORCE_GPU_ALLOW_GROWTH": "false",
            "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c,GPU-d"}
    result = placed(two_socket_host, options, 1, 2, replicas=2, env=user, index=5)
    assert result.cpus == [2, 6, 3, 7]
    assert result.env == {"TF_NUM_INTRAOP_THREADS": "4", "TF_NUM_INTEROP_THREADS": "2",
                          "CUDA_VISIBLE_DEVICES": "GPU-c,GPU-d"}
    assert "instance 5 on host nodeA: CPUs 2-3,6-7 (bind-to core), NUMA node 1, threads: " \
           "intra-op 4, inter-op 2, OMP 3 (set by the user), GPUs GPU-c,GPU-d" in result.report


def test_place_unbound_budget_no_gpu_and_opt_outs(two_socket_host, tmp_path):
    on = placement_text.encode("none", True, "auto", False)
    result = placed(tmp_path / "bare", on, 0, 3, allowed=[0, 1, 2, 3, 4, 5, 6])
    assert result.cpus is None and result.report == "" and result.notes == []
    assert result.env == {"OMP_NUM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2",
                          "TF_NUM_INTEROP_THREADS": "2"}  # 7 CPUs // 3, no GPU: nothing set
    one = placed(tmp_path / "bare", on, 2, 3, allowed=[0])
    assert one.env["OMP_NUM_THREADS"] == "1"
    off = placement_text.encode("none", False, "none", False)
    assert off == "" and placement_text.for_instance(off, 0, 0, 1, 1) == ""
    gpus_only = placed(two_socket_host, placement_text.encode("none", False, "2", False), 0, 1)
    assert gpus_only.env == {"CUDA_VISIBLE_DEVICES": "0,1", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    # Too few GPUs: shared round-robin, and one note per host (from local instance 0).
    short = [placed(two_socket_host, placement_text.encode("none", False, "auto", False), j, 3,
                    replicas=2) for j in range(3)]
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in short] == ["0,1", "2,3", "0,1"]
    assert short[0].notes == ["poprun-lite: note: host nodeA has 4 GPU(s) for 3 instance(s) x 2; "
                              "instances share them round-robin (memory growth on)."]
    assert short[1].notes == short[2].notes == []
    crowded = placed(two_socket_host, placement_text.encode("core", True, "none", False), 0, 9,
                     allowed=[0, 1])
    assert crowded.notes == ["poprun-lite: note: --bind-to core on host nodeA: 9 instances "
                             "share 2 cores round-robin."]


def test_the_plan_tells_each_instance_its_place_on_its_host():
    hosts = (Host("a", "10.0.0.1", local=False), Host("b", "10.0.0.2", local=False))
    plan = build_plan(["prog"], 3, [1, 2, 3], ("10.0.0.9", 9), num_replicas=6, hosts=hosts,
                      counts=[2, 1], placement=placement_text.encode("core", True, "auto", False))
    assert [plan.instance_env(i)[placement_text.PLACEMENT_ENV] for i in range(3)] == [
        "bind=core threads=1 gpus=auto report=0 index=0 local=0/2 replicas=2",
        "bind=core threads=1 gpus=auto report=0 index=1 local=1/2 replicas=2",
        "bind=core threads=1 gpus=auto report=0 index=2 local=0/1 replicas=2"]
    bare = build_plan(["prog"], 1, [1], ("10.0.0.9", 9), placement="")
    assert placement_text.PLACEMENT_ENV not in bare.instance_env(0)


def test_engines_leave_binding_to_the_wrappers(tmp_path, monkeypatch):
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    slots = [HostSlots("n1", 2), HostSlots("n2", 2)]
    wiring = Wiring("/tmp/launcher.sock", ("10.0.0.9", 5000), 60.0)
    for bind, expected in (("core", True), ("numa", True), ("none", False)):
        plan = build_plan(["prog"], 4, [1, 2, 3, 4], ("10.0.0.9", 9), counts=[2, 2],
                          hosts=(Host("n1", "10.0.0.1", local=False),
                                 Host("n2", "10.0.0.2", local=False)),
                          placement=placement_text.encode(bind, True, "auto", False))
        argv = SlurmBackend(slots, [2, 2]).command(plan, wiring)
        assert ("--cpu-bind=none" in argv) is expected, argv
        mpirun = MpiBackend(slots, [2, 2]).command(plan, wiring)
        assert mpirun[mpirun.index("--bind-to") + 1] == "none"


# ---- through the real CLI -----------------------------------------------------------------
@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return str(path)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in THREADS + ("CUDA_VISIBLE_DEVICES",)}
    env.update(extra)
    return env


def run_probe(*args, env=None, cwd=None):
    result = poprun(*args, env=env or clean_env(), cwd=cwd, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = [json.loads(line.split("PROBE ", 1)[1]) for line in result.stdout.splitlines()
            if "PROBE " in line]
    return sorted(seen, key=lambda s: s["index"]), result.stderr


def check_core_blocks(bindings):
    """Independent of placement.py's block arithmetic: each binding is whole cores; with no
    more instances than cores the blocks are contiguous, disjoint, cover the allowed CPUs and
    differ by at most one core; with more, cores are dealt round-robin."""
    cores = placement.physical_cores(os.sched_getaffinity(0))
    core_of = {cpu: n for n, core in enumerate(cores) for cpu in core}
    used = [sorted({core_of[cpu] for cpu in cpus}) for cpus in bindings]
    for cpus, numbers in zip(bindings, used):
        assert sorted(cpus) == sorted(c for n in numbers for c in cores[n])
    if len(bindings) > len(cores):
        assert used == [[j % len(cores)] for j in range(len(bindings))]
        return
    assert [n for numbers in used for n in numbers] == list(range(len(cores)))
    assert all(numbers == list(range(numbers[0], numbers[-1] + 1)) for numbers in used)
    assert max(map(len, used)) - min(map(len, used)) <= 1


@pytest.mark.parametrize("backend, np_", [("local", 2), ("mpi", 4)])
def test_bind_to_core_binds_each_instance_and_reports_it(probe, backend, np_):
    seen, stderr = run_probe("-np", str(np_), "--backend", backend, "--bind-to", "core",
                             "--report-bindings", probe)
    blocks = [s["cpus"] for s in seen]
    check_core_blocks(blocks)
    for s, block in zip(seen, blocks):
        sharers = sum(1 for b in blocks if b == block)
        budget = str(max(1, len(block) // sharers))
        assert s["env"] == {"OMP_NUM_THREADS": budget, "TF_NUM_INTRAOP_THREADS": budget,
                            "TF_NUM_INTEROP_THREADS": str(min(2, int(budget))),
                            "CUDA_VISIBLE_DEVICES": None}
        assert not s["placement_seen"]
    reports = {int(m[1]): m for m in REPORT.findall(stderr)}
    assert sorted(reports) == list(range(np_)), stderr
    for i, m in reports.items():
        assert m[1] == m[0] and m[2] == os.uname().nodename
        assert placement.parse_cpulist(m[3]) == blocks[i]
        assert m[4].startswith("bind-to core")
        assert m[6:] == (seen[i]["env"]["TF_NUM_INTRAOP_THREADS"],
                         seen[i]["env"]["TF_NUM_INTEROP_THREADS"],
                         seen[i]["env"]["OMP_NUM_THREADS"])


def test_budget_by_default_user_values_win_and_the_budget_turns_off(probe):
    allowed = sorted(os.sched_getaffinity(0))
    budget = str(max(1, len(allowed) // 3))
    seen, stderr = run_probe("-np", "3", "--backend", "local", "-x", "OMP_NUM_THREADS=3", probe,
                             env=clean_env(TF_NUM_INTEROP_THREADS="5"))
    assert stderr == ""
    for s in seen:
        assert s["cpus"] == allowed  # --bind-to none by default
        assert s["env"] == {"OMP_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": budget,
                            "TF_NUM_INTEROP_THREADS": "5", "CUDA_VISIBLE_DEVICES": None}
    seen, _ = run_probe("-np", "2", "--backend", "mpi", "--no-thread-budget", probe)
    assert [s["env"] for s in seen] == [dict.fromkeys(THREADS + ("CUDA_VISIBLE_DEVICES",))] * 2


def test_numa_aware_binds_to_nodes_round_robin(probe):
    seen, stderr = run_probe("-np", "2", "--backend", "mpi", "--numa-aware=yes",
                             "--report-bindings", probe)
    nodes = placement.numa_nodes(os.sched_getaffinity(0))
    for s in seen:
        node, cpus = nodes[s["local"] % len(nodes)]
        assert s["cpus"] == cpus
        sharers = len(range(s["local"] % len(nodes), 2, len(nodes)))
        assert s["env"]["OMP_NUM_THREADS"] == str(max(1, len(cpus) // sharers))
    lines = [m for m in REPORT.findall(stderr)]
    assert len(lines) == 2 and all(m[4] == "bind-to numa" for m in lines), stderr


def test_config_file_and_bad_values(tmp_path, probe):
    config = tmp_path / "placed.toml"
    config.write_text('bind-to = "core"\nthread-budget = false\ngpus-per-instance = "none"\n')
    shown = poprun("--config", str(config), "-np", "2", "--print-topology", probe, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "POPRUN_PLACEMENT=bind=core threads=0 gpus=none report=0 index=1 local=1/2 " \
           "replicas=1" in shown.stdout
    bad = poprun("--bind-to", "socket", probe, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "Invalid value for '--bind-to': 'socket' is not one of 'none', 'core', 'numa'." \
        in bad.stderr
    both = poprun("--numa-aware", "--bind-to", "core", probe, timeout=60)
    assert both.returncode == 2 and "give only one of them" in both.stderr
    gpus = poprun("--gpus-per-instance", "0", probe, timeout=60)
    assert gpus.returncode == 2
    assert "--gpus-per-instance '0' is not auto, none or a number of GPUs" in gpus.stderr


TF_THREADS = """
import json, os
import tensorflow as tf
a = tf.random.normal([256, 256])
for _ in range(3):
    a = tf.linalg.matmul(a, a) / 256.0
_ = a.numpy()
print("PROBE " + json.dumps({"index": 0, "threads": len(os.listdir("/proc/self/task")),
      "intra": os.environ["TF_NUM_INTRAOP_THREADS"],
      "inter": os.environ["TF_NUM_INTEROP_THREADS"]}))
"""


@pytest.mark.slow
def test_tensorflow_thread_pools_follow_the_budget(tmp_path):
    # TensorFlow sizes its intra-op pool (n - 1 threads beside the caller) and its inter-op pool
    # (n threads) from TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS: the difference in live
    # threads against 1 + 1 is (intra - 1) + (inter - 1).
    path = tmp_path / "tf_threads.py"
    path.write_text(TF_THREADS)
    env = clean_env(TF_CPP_MIN_LOG_LEVEL="3")
    (one,), _ = run_probe("--backend", "local", "-x", "TF_NUM_INTRAOP_THREADS=1",
                          "-x", "TF_NUM_INTEROP_THREADS=1", str(path), env=env)
    (budget,), _ = run_probe("--backend", "local", str(path), env=env)
    intra, inter = int(budget["intra"]), int(budget["inter"])
    assert intra == len(os.sched_getaffinity(0)) and inter == min(2, intra)
    assert budget["threads"] - one["threads"] == (intra - 1) + (inter - 1)


@pytest.mark.slow
def test_ssh_hosts_each_bind_their_own_instances(tmp_path, probe):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as hosts:
        seen, stderr = run_probe(
            "-np", "4", "-H", "hostA:2,hostB:2", "--ssh-config", hosts.ssh_config,
            "--host-subnet", hosts.subnet, "--backend", "ssh", "--bind-to", "core",
            "--report-bindings", probe, cwd=str(tmp_path))
    assert [(s["host"], s["local"]) for s in seen] == [("hostA", 0), ("hostA", 1),
                                                       ("hostB", 0), ("hostB", 1)]
    check_core_blocks([s["cpus"] for s in seen[:2]])
    assert [s["cpus"] for s in seen[2:]] == [s["cpus"] for s in seen[:2]]
    reports = sorted((int(m[1]), m[2], m[4]) for m in REPORT.findall(stderr))
    assert reports == [(0, "hostA", "bind-to core"), (1, "hostA", "bind-to core"),
                       (2, "hostB", "bind-to core"), (3, "hostB", "bind-to core")], stderr
