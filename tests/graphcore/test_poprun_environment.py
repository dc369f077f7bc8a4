"""PopRun's environment for IPU programs (popdist_launcher.compat.poprun_environment): an IPU
program under poprun-lite sees none of the HOROVOD_* variables the launcher set (PopRun's
instances had none), only those the user exported, on the local (Gloo), mpi, ssh (two
network-namespace hosts) and srun (inside a one-node Slurm allocation, conftest's ``slurm``)
backends alike, and Horovod through ``ipu.horovod`` still works; a
program that never names Graphcore's modules keeps horovodrun's variables."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LAUNCHER, poprun
from netns_hosts import TestHosts, require_test_hosts

PROGRAM = str(Path(__file__).parent / "programs" / "poprun_environment.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def netns_hosts(tmp_path_factory):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path_factory.mktemp("hosts")) as hosts:
        yield hosts


@pytest.mark.parametrize("backend", ["local", "mpi", "ssh", "srun"])
def test_an_ipu_program_sees_poprun_s_environment_and_horovod_works(request, tmp_path, backend):
    job = ["-np", "2", "-x", "HOROVOD_CYCLE_TIME=1", PROGRAM, str(tmp_path)]
    if backend == "srun":  # poprun-lite inside an allocation picks srun by itself
        result = subprocess.run(["salloc", "-N1", "-n2", "--quiet", *LAUNCHER,
                                 "--start-timeout", "60", *job], capture_output=True, text=True,
                                timeout=300, env=request.getfixturevalue("slurm"))
        assert "backend srun" in subprocess.run(
            ["salloc", "-N1", "-n2", "--quiet", *LAUNCHER, "--print-topology", *job],
            capture_output=True, text=True, timeout=300,
            env=request.getfixturevalue("slurm")).stdout
    else:
        where = ["--backend", backend]
        if backend == "ssh":
            hosts = request.getfixturevalue("netns_hosts")
            where += ["-H", "hostA:1,hostB:1", "--ssh-config", hosts.ssh_config,
                      "--host-subnet", hosts.subnet, "--start-timeout", "60"]
        result = poprun(*where, *job, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for rank in range(2):
        got = json.loads((tmp_path / f"environment-{rank}.json").read_text())
        assert got["after_numpy"] == ["HOROVOD_CYCLE_TIME"]  # the user's -x only
        assert got["after_imports"] == ["HOROVOD_CYCLE_TIME"]
        # hvd.init() sets its own process-set switch, as under PopRun
        assert set(got["after_init"]) <= {"HOROVOD_CYCLE_TIME", "HOROVOD_DYNAMIC_PROCESS_SETS"}
        assert (got["rank"], got["size"], got["sum"]) == (rank, 2, 3.0)


def test_a_plain_program_keeps_horovodrun_s_variables():
    source = ("import os, numpy, tensorflow; "
              "print(sorted(k for k in os.environ if k.startswith('HOROVOD_R')))")
    result = poprun("-np", "2", "--backend", "local", sys.executable, "-c", source, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for rank in range(2):
        assert f"[{rank}]<stdout>:['HOROVOD_RANK']" in result.stdout
