"""The slurm backend, for real: a one-node Slurm cluster (slurm-wlm + munge) started by
scripts/slurm-local.sh, poprun-lite inside `salloc` choosing srun by itself. Plus the runtime
context of a plain srun task, from SLURM_* variables recorded on that cluster."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHER, program
from popdist_launcher import runtime
from popdist_launcher.launcher.layout import topology

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
RECORDED = Path(__file__).parent / "data" / "slurm"


def test_inside_salloc_poprun_lite_starts_instances_with_srun(slurm, tmp_path):
    result = subprocess.run(
        ["salloc", "-N1", "-n4", *LAUNCHER, "-np", "4", "--start-timeout", "60",
         program("dump_env.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=slurm)
    assert result.returncode == 0, result.stderr[-3000:]
    envs = [json.loads((tmp_path / f"instance-{i}.json").read_text()) for i in range(4)]
    workers = json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"]
    assert len(set(workers)) == 4
    for i, env in enumerate(envs):
        assert env["POPDIST_INSTANCE_INDEX"] == str(i)
        assert env["POPDIST_NUM_INSTANCES"] == "4"
        assert env["HOROVOD_RANK"] == str(i) and env["HOROVOD_LOCAL_RANK"] == str(i)
        assert json.loads(env["TF_CONFIG"])["task"]["index"] == i
    assert "[0]<stdout>:" not in result.stderr  # srun's labels were turned into our tags
    topo = subprocess.run(["salloc", "-N1", "-n4", *LAUNCHER, "-np", "4", "--print-topology",
                           "python", "-c", "pass"], capture_output=True, text=True, timeout=300,
                          env=slurm)
    assert "backend srun" in topo.stdout and "--kill-on-bad-exit=1" in topo.stdout, topo.stderr


def test_plain_srun_task_reads_its_place_from_slurm_variables():
    task3 = json.loads((RECORDED / "srun-task3.json").read_text())
    ctx = runtime.context_from_environ(task3)
    assert (ctx.launched, ctx.num_instances, ctx.instance_index) == (True, 4, 3)
    assert (ctx.local_instance_index, ctx.num_total_replicas, ctx.replica_index_offset) == (3, 4, 3)
    salloc = json.loads((RECORDED / "salloc.json").read_text())
    assert runtime.context_from_environ(salloc) == runtime.SINGLE_INSTANCE  # no task yet


def job_options(*args, environ):
    """The JobOptions the command line ``poprun-lite ARGS true`` builds in ``environ``."""
    from popdist_launcher import launch
    from popdist_launcher.launcher import options

    return options.build(launch.cli.make_context("poprun-lite", [*args, "true"]).params, environ)


def test_auto_backend_inside_an_allocation_is_srun():
    salloc = json.loads((RECORDED / "salloc.json").read_text())
    if shutil.which("srun") is None:
        with pytest.raises(topology.TopologyError, match="needs Slurm's srun"):
            job_options("-np", "4", environ=salloc)
        return
    layout = job_options("-np", "4", environ=salloc).layout
    assert layout.backend.name == "srun"
    assert [(s.name, s.slots) for s in layout.slots] == [("node0", 4)]


def test_an_elastic_job_in_an_allocation_restarts_a_failed_task_with_a_new_srun_step(
        slurm, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "done").write_text("")
    result = subprocess.run(
        ["salloc", "-N1", "-n3", *LAUNCHER, "-np", "3", "--min-np", "2", "--start-timeout", "60",
         program("elastic_member.py"), str(runs), "1", "done"],
        capture_output=True, text=True, timeout=300, env=slurm)
    assert result.returncode == 0, result.stderr[-3000:]
    first = [json.loads(p.read_text()) for p in runs.glob("a0-*.json")]
    again = [json.loads(p.read_text()) for p in runs.glob("a1-*.json")]
    assert sorted(r["index"] for r in again) == [0, 1, 2]
    steps = {r["slurm_step"] for r in first}, {r["slurm_step"] for r in again}
    assert len(steps[0]) == len(steps[1]) == 1 and None not in steps[0] | steps[1]
    assert steps[0] != steps[1]  # one srun step per attempt
    assert "instance 1 was killed by SIGKILL" in result.stderr
    assert "restarting in place (failure 1 of " \
           "--host-failure-limit 3, counted again from 1 after progress) -> 3 instance(s)" \
           in result.stderr
    assert "===== elastic job: 2 attempt(s) =====" in result.stderr
