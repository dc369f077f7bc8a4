"""The command lines PopRun, horovodrun and mpirun users bring, through the real CLI.

Most checks use --print-topology (nothing starts) or short programs on the local backend.
"""
import json
import os
import re
import socket
import tomllib

import pytest

from conftest import poprun, program

STAMP = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\]"
SHOW_INDEX = "import os; print('from', os.environ['POPDIST_INSTANCE_INDEX'])"


def instance_hosts(stdout: str) -> list:
    """The host column of --print-topology's instance table, in instance order."""
    rows = re.findall(r"^(\d+)\s+(\S+)\s+\d+\s+\S+\s+\S+:\d+$", stdout, re.M)
    return [host for _, host in sorted(rows, key=lambda r: int(r[0]))]


def test_poprun_guide_command_runs_with_one_line_for_the_ipu_options():
    result = poprun("--vipu-server-host", "vipu.example", "--vipu-partition", "p64",
                    "--update-partition=yes", "--reset-partition=no", "--num-ilds", "1",
                    "--executable-cache-path", "/tmp/cache", "--offline-mode=1",
                    "--num-instances", "2", "--num-replicas", "4", "--ipus-per-replica", "1",
                    "--host", "localhost", "--print-topology=yes", "true", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "2 instance(s), 4 replica(s) (2 per instance)" in result.stdout
    notes = result.stderr.splitlines()
    assert len(notes) == 1, notes
    assert notes[0].startswith("poprun-lite: note: --vipu-server-host, --vipu-partition, "
                               "--update-partition, --num-ilds, --executable-cache-path, "
                               "--offline-mode have no effect here")
    assert "--reset-partition" not in notes[0]  # =no: not given


def test_numa_aware_and_instance_mpi_local_args_are_accepted_and_say_what_they_do():
    result = poprun("-np", "2", "--backend", "local", "--numa-aware=yes",
                    "--instance-mpi-local-args", '1:-x FOO="a b"', "--print-topology", "true",
                    timeout=60)
    assert result.returncode == 0, result.stderr
    notes = result.stderr.splitlines()
    assert len(notes) == 1, notes  # --numa-aware is applied (tests/test_placement.py)
    assert "--instance-mpi-local-args has no effect on this backend" in notes[0]
    assert "POPRUN_PLACEMENT=bind=numa " in result.stdout
    quiet = poprun("-np", "2", "--numa-aware=no", "--print-topology", "true", timeout=60)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize("args, words", [
    (["-np", "2", "--instance-mpi-local-args", "2:-x A=1"],
     "--instance-mpi-local-args 2:... is not an instance of this job; expected an index in 0..1"),
    (["--instance-mpi-local-args", "-x A=1"], "has no instance index"),
    (["--instance-mpi-local-args", "0:'open"], "cannot be split into arguments"),
    (["--print-topology=maybe"], "--print-topology takes yes or no"),
    (["--tf1=maybe"], "--tf1 takes yes or no"),
    (["-np", "2", "--only-output-from-instance", "0,2"],
     "--only-output-from-instance 2 is not an instance of this job; expected 0..1"),
    (["--local-ranks-filter", "0,x"], "'0,x' is not a list of instance indices"),
    (["--vipu-server-port", "http"], "'http' is not a valid integer"),
])
def test_bad_compat_values_are_one_sentence(args, words):
    result = poprun(*args, "true", timeout=60)
    assert result.returncode == 2
    assert words in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_hosts_without_slots_divide_instances_evenly_like_poprun(tmp_path):
    result = poprun("-np", "4", "-H", "localhost,127.0.0.1", "--print-topology", "true",
                    timeout=60)
    assert result.returncode == 0, result.stderr
    assert instance_hosts(result.stdout) == ["localhost"] * 2 + ["127.0.0.1"] * 2
    odd = poprun("-np", "5", "-H", "localhost,127.0.0.1", "--print-topology", "true", timeout=60)
    assert instance_hosts(odd.stdout) == ["localhost"] * 3 + ["127.0.0.1"] * 2
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost\n127.0.0.1\n")  # PopRun's hostfile: a plain list of names
    listed = poprun("-np", "4", "--hostfile", str(hostfile), "--print-topology", "true",
                    timeout=60)
    assert instance_hosts(listed.stdout) == ["localhost"] * 2 + ["127.0.0.1"] * 2
    # Slots given: mpirun's rules stay (a host named without slots has one).
    short = poprun("-np", "4", "-H", "localhost:2,127.0.0.1", "true", timeout=60)
    assert short.returncode == 2
    assert "4 instances need 4 slots but -H gives 3" in short.stderr


def test_np_defaults_to_one_instance_per_slot_like_mpirun(tmp_path):
    slots = poprun("-H", "localhost:2,127.0.0.1:2", "--print-topology", "true", timeout=60)
    assert "4 instance(s)" in slots.stdout
    assert instance_hosts(slots.stdout) == ["localhost"] * 2 + ["127.0.0.1"] * 2
    names = poprun("-H", "localhost,127.0.0.1", "--print-topology", "true", timeout=60)
    assert instance_hosts(names.stdout) == ["localhost", "127.0.0.1"]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=3\n")
    from_file = poprun("--hostfile", str(hostfile), "--print-topology", "true", timeout=60)
    assert "3 instance(s)" in from_file.stdout
    alone = poprun("--print-topology", "true", timeout=60)
    assert "1 instance(s)" in alone.stdout


def test_horovodrun_and_mpirun_spellings_set_the_same_options(tmp_path):
    exported = tmp_path / "job.toml"
    result = poprun("-np", "2", "-p", "2222", "-i", "key.pem", "--output-filename",
                    str(tmp_path / "out"), "--mpi-args", "--mca btl tcp,self",
                    "--timeline-filename", "timeline.json", "--autotune",
                    "--autotune-log-file", "tune.csv", "--print-topology",
                    "--export-config", str(exported), "true", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"HOROVOD_TIMELINE={tmp_path / 'timeline.json'}" in result.stdout
    assert "HOROVOD_AUTOTUNE=1" in result.stdout
    assert f"HOROVOD_AUTOTUNE_LOG={tmp_path / 'tune.csv'}" in result.stdout
    options = tomllib.loads(exported.read_text())
    assert options["ssh-port"] == 2222 and options["ssh-identity"] == "key.pem"
    assert options["output-dir"] == str(tmp_path / "out")
    assert options["mpi-global-args"] == "--mca btl tcp,self"
    assert options["timeline-filename"] == "timeline.json" and options["autotune"] is True


def test_only_output_from_a_list_of_instances(tmp_path):
    result = poprun("-np", "3", "--backend", "local", "--only-output-from-instance", "0,2",
                    "--output-dir", str(tmp_path), "python", "-c", SHOW_INDEX, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0]<stdout>:from 0", "[2]<stdout>:from 2"]
    assert (tmp_path / "attempt-0" / "instance-1.stdout.log").read_text() == "from 1\n"
    torchrun = poprun("-np", "2", "--backend", "local", "--local-ranks-filter", "1", "python",
                      "-c", SHOW_INDEX, timeout=120)
    assert torchrun.stdout.splitlines() == ["[1]<stdout>:from 1"]


def test_timestamp_output_and_host_in_tag(tmp_path):
    program = "import sys; sys.stdout.write('one\\ntwo\\n'); sys.stdout.flush(); print('three')"
    result = poprun("-np", "2", "--backend", "local", "--timestamp-output=yes",
                    "--tag-output-host", "--output-dir", str(tmp_path), "python", "-c", program,
                    timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    host = re.escape(socket.gethostname())
    for index in (0, 1):
        mine = [line for line in lines if f"[{index}@" in line]
        assert len(mine) == 3
        for line, text in zip(mine, ("one", "two", "three")):
            assert re.fullmatch(rf"{STAMP}\[{index}@{host}\]<stdout>:{text}", line), line
        log = (tmp_path / "attempt-0" / f"instance-{index}.stdout.log").read_text()
        assert re.fullmatch(rf"{STAMP}one\n{STAMP}two\n{STAMP}three\n", log), log
    plain = poprun("--backend", "local", "--timestamp-output", "--no-tag-output", "python",
                   "-c", "print('x')", timeout=120)
    assert re.fullmatch(rf"{STAMP}x\n", plain.stdout), plain.stdout


def test_export_config_round_trips_newlines_and_quotes_through_import_config(tmp_path):
    value = 'first line\nsecond "quoted" \\ line\ttab'
    exported = tmp_path / "job.toml"
    show = "import os; print(repr(os.environ['ODD']))"
    first = poprun("--backend", "local", "-x", f"ODD={value}", "--only-output-from-instance",
                   "0", "--export-config", str(exported), "python", "-c", show, timeout=120)
    assert first.returncode == 0, first.stderr
    assert tomllib.loads(exported.read_text())["env"] == [f"ODD={value}"]
    again = poprun("--import-config", str(exported), "python", "-c", show, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"[0]<stdout>:{value!r}\n"
    # PopRun keeps an exported file unless told to overwrite it.
    kept = poprun("--export-config", str(exported), "true", timeout=60)
    assert kept.returncode == 2
    assert "already exists; pass --overwrite-config" in kept.stderr
    replaced = poprun("--export-config", str(exported), "--overwrite-config=yes",
                      "--num-replicas", "3", "-np", "3", "--print-topology", "true", timeout=60)
    assert replaced.returncode == 0, replaced.stderr
    assert tomllib.loads(exported.read_text())["num-replicas"] == 3


def test_boolean_values_only_apply_to_poprun_lite_options():
    # After PROGRAM, words are the program's own, even when they look like PopRun's.
    result = poprun("--backend", "local", "--tag-output=no", "python", "-c",
                    "import sys; print(sys.argv[1:])", "--print-topology=yes", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['--print-topology=yes']\n"
    from_env = poprun("true", env=dict(os.environ, POPRUN_PRINT_TOPOLOGY="yes"), timeout=60)
    assert "1 instance(s)" in from_env.stdout


def test_instance_mpi_local_args_reach_only_their_instance_under_mpirun():
    show = ("import os; print(os.environ['POPDIST_INSTANCE_INDEX'], os.environ.get('CHECK'), "
            "os.environ['OMPI_COMM_WORLD_RANK'])")
    result = poprun("-np", "3", "--backend", "mpi", "--instance-mpi-local-args", "1:-x CHECK=one",
                    "--instance-mpi-local-args", '2:-x "CHECK=two words"', "python", "-c", show,
                    timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert sorted(result.stdout.splitlines()) == [
        "[0]<stdout>:0 None 0", "[1]<stdout>:1 one 1", "[2]<stdout>:2 two words 2"]


def test_horovod_over_mpi_works_with_one_app_context_per_instance(tmp_path):
    result = poprun("-np", "2", "--backend", "mpi", "--instance-mpi-local-args", "1:-x CHECK=1",
                    program("hvd_allreduce.py"), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"hvd-{rank}.json").read_text())
        assert seen["rank"] == rank and seen["size"] == 2 and seen["sum"] == 3.0
        assert seen["gathered"] == [0, 1]


@pytest.mark.slow
def test_poprun_hosts_without_slots_across_two_hosts_with_the_host_in_the_tag(tmp_path):
    from netns_hosts import TestHosts, require_test_hosts
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as hosts:
        where = ["--ssh-config", hosts.ssh_config, "--host-subnet", hosts.subnet]
        layout = poprun("-np", "4", "-H", "hostA,hostB", *where, "--print-topology=yes", "true",
                        timeout=120)
        assert layout.returncode == 0, layout.stderr
        assert instance_hosts(layout.stdout) == ["hostA", "hostA", "hostB", "hostB"]
        show = "import socket; print(socket.gethostname())"
        result = poprun("-H", "hostA:2,hostB:1", *where, "--backend", "ssh", "--tag-output-host",
                        "python", "-c", show, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert sorted(result.stdout.splitlines()) == [
            "[0@hostA]<stdout>:hostA", "[1@hostA]<stdout>:hostA", "[2@hostB]<stdout>:hostB"]


def test_timeline_filename_records_horovods_timeline(tmp_path):
    timeline = tmp_path / "timeline.json"
    result = poprun("-np", "2", "--timeline-filename", str(timeline), program("hvd_allreduce.py"),
                    str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    text = timeline.read_text()
    # Rank 0's allreduce, the program's first collective. (Not its last, the allgather: Horovod's
    # timeline writer may still hold the last records when the program exits and drop them.)
    assert text.startswith("[") and '"NEGOTIATE_ALLREDUCE"' in text, text[-2000:]


@pytest.mark.parametrize("variables, expected", [
    ({"OMPI_MCA_plm_rsh_agent": "/etc/mpi/kubexec.sh"}, ("/etc/mpi/kubexec.sh",)),
    ({"OMPI_MCA_plm_rsh_agent": "ssh", "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"},
     ("ssh", "-o", "ConnectionAttempts=10")),
    ({"PRTE_MCA_plm_ssh_agent": "no-such-agent-here : sh -c", "OMPI_MCA_plm_rsh_agent": "x"},
     ("sh", "-c")),
    ({"OMPI_MCA_plm_rsh_agent": "  "}, ()),
    ({}, ()),
])
def test_mpi_remote_shell_agent_read_like_open_mpi(variables, expected):
    from popdist_launcher.launcher.layout.remote import SshOptions, agent_from_environ

    agent = agent_from_environ(dict(variables, PATH=os.environ["PATH"]))
    assert agent == expected
    argv = SshOptions(agent=agent).argv("worker-1", "true")
    assert argv == ([*expected, "worker-1", "true"] if expected else
                    [*SshOptions().base_argv(), "--", "worker-1", "true"])


def test_mpi_agent_is_kept_for_mpirun_and_dropped_for_ssh(tmp_path):
    """An MPIJob's agent goes to mpirun (auto picks mpirun for other hosts); --backend ssh keeps
    plain ssh, since an agent such as kubectl exec may not carry stdin."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0.example slots=1\nworker-1.example slots=1\n")
    env = dict(os.environ, OMPI_MCA_plm_rsh_agent="/etc/mpi/kubexec.sh")
    from popdist_launcher import launch
    from popdist_launcher.launcher import options

    def layout(*args):
        words = ["-np", "2", "--hostfile", str(hostfile), *args, "true"]
        return options.build(launch.cli.make_context("poprun-lite", words).params, env).layout

    auto = layout()
    assert auto.backend.name == "mpirun" and auto.ssh.agent == ("/etc/mpi/kubexec.sh",)
    plain = layout("--backend", "ssh")
    assert plain.backend.name == "ssh" and plain.ssh.agent == ()
