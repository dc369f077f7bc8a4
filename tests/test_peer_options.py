"""Other launchers' spellings: torchrun's, mpirun's, horovodrun's and PopRun's options that
poprun-lite does not take get one sentence naming ours (exit 2, no traceback), and our options
after the program name get a one-line note while the job runs as written."""
import re

import click
import pytest

from conftest import poprun
from popdist_launcher.launch import cli
from popdist_launcher.launcher.cli import peer_options

OURS = {name for p in cli.params if isinstance(p, click.Option)
        for name in p.opts + p.secondary_opts}


def test_no_peer_option_is_one_of_ours_and_every_answer_names_options_we_have():
    assert not set(peer_options.PEERS) & OURS
    for name, (tool, sentence) in peer_options.PEERS.items():
        named = set(re.findall(r"(?<![\w'-])(--?[a-zA-Z][\w-]*)", sentence))  # not '--mca
        assert named <= OURS, (name, named - OURS)


def test_answers_find_the_option_click_names():
    assert peer_options.answer("--nproc_per_node", ["--nproc_per_node=2", "t.py"]) == (
        "--nproc_per_node is torchrun's option, not poprun-lite's: -np N starts N instances (on "
        "one host; -H host:N for each host).")
    # click names the first unknown letter of a single-dash word
    assert peer_options.answer("-o", ["-hostfile", "h", "t.py"]).startswith("-hostfile is mpirun")
    assert peer_options.answer("--bogus", ["--bogus", "t.py"]) is None
    assert peer_options.answer("--nnodes", ["--", "--nnodes"]) is None


def test_ours_after_the_program_less_those_programs_often_have():
    assert peer_options.ours_after_program(
        ["--epochs", "3", "-np", "2", "--num-replicas=4", "-v", "--config", "c.yaml", "-np"],
        OURS) == ["-np", "--num-replicas"]
    assert peer_options.ours_after_program(["--", "-np", "2"], OURS) == []


@pytest.mark.parametrize("words, sentence", [
    (["--nproc-per-node", "2"], "--nproc-per-node is torchrun's option, not poprun-lite's: -np N"),
    (["--nproc_per_node=2"], "--nproc_per_node is torchrun's option, not poprun-lite's: -np N"),
    (["--nnodes", "2"], "--nnodes is torchrun's option, not poprun-lite's: name the hosts"),
    (["--node-rank", "0"], "--node-rank is torchrun's option, not poprun-lite's: there is no "
                           "command per host"),
    (["--rdzv-endpoint", "h:29400"], "poprun-lite is its own rendezvous"),
    (["--rdzv_backend", "c10d"], "poprun-lite is its own rendezvous"),
    (["--standalone"], "--standalone is torchrun's option, not poprun-lite's: one host is the "
                       "default"),
    (["--master-addr", "h"], "poprun-lite is its own rendezvous"),
    (["-n", "2"], "-n is mpirun's option, not poprun-lite's: -np N (or --num-instances N)."),
    (["--np", "2"], "--np is mpirun's option, not poprun-lite's: -np N"),
    (["-hostfile", "hosts"], "-hostfile is mpirun's option, not poprun-lite's: --hostfile FILE."),
    (["--map-by", "node"], "--map-by is mpirun's option, not poprun-lite's: poprun-lite places "
                           "instances in host order itself"),
    (["--mca", "btl", "tcp"], "--mpi-global-args '--mca NAME VALUE'"),
    (["--gloo"], "--gloo is horovodrun's option, not poprun-lite's: --backend local"),
    (["--fusion-threshold-mb", "64"], "-x HOROVOD_FUSION_THRESHOLD=VALUE"),
    (["--process-placement", "spreadnuma"], "--process-placement is PopRun's option"),
])
def test_a_peers_option_gets_one_sentence_naming_ours(words, sentence):
    result = poprun(*words, "true", timeout=30)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("poprun-lite: error: ")
    assert sentence in lines[0] and "Did you mean" not in lines[0]
    assert "Traceback" not in result.stderr


def test_an_unknown_option_of_no_peer_keeps_clicks_answer():
    result = poprun("--nproc-per-nod", "2", "true", timeout=30)
    assert result.returncode == 2
    assert "No such option '--nproc-per-nod'" in result.stderr


def test_our_options_after_the_program_go_to_it_with_one_note():
    result = poprun("--backend", "local", "python", "-c", "import sys; print(sys.argv[1:])",
                    "-np", "2", "--epochs", "3", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[0]<stdout>:['-np', '2', '--epochs', '3']"]
    assert result.stderr.splitlines() == [
        "poprun-lite: note: -np after python goes to the program, as with mpirun, not to "
        "poprun-lite; for poprun-lite, put it before the program (poprun-lite -np ... python)."]
