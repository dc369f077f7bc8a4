"""Bad input through the real CLI: one sentence on stderr naming the value and the fix, exit 2,
never a traceback or a hang; config values of the wrong type; numbers that are not finite."""
import os
import random

import pytest

from conftest import poprun


def one_error_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("poprun-lite: error:"), lines[0]
    return lines[0]


def refused(*args, env=None, words: str) -> None:
    result = poprun(*args, timeout=60, env=env)
    line = one_error_line(result)
    assert result.returncode == 2, result.stderr
    assert words in line, line


@pytest.mark.parametrize("args, words", [
    (["--start-timeout", "nan"], "--start-timeout nan is not a usable number of seconds"),
    (["--start-timeout", "inf"], "--start-timeout inf is not a usable number of seconds"),
    (["--start-timeout", "0"], "more than 0"),
    (["--start-timeout", "1e9"], "at most 604800"),
    (["--grace-period", "nan"], "--grace-period nan is not a usable number of seconds"),
    (["--grace-period", "inf"], "--grace-period inf is not a usable number of seconds"),
    (["--grace-period", "-1"], "0 or more"),
    (["-np", "1000000000000"], "--num-instances must be at most 65536, got 1000000000000"),
    (["-np", "-3"], "--num-instances must be at least 1, got -3"),
    (["--mpi-global-args", "--mca btl 'tcp,self"], "--mpi-global-args \"--mca btl 'tcp,self\" "
                                                   "cannot be split into arguments"),
    (["--mpi-local-args", '-x "A'], "--mpi-local-args '-x \"A' cannot be split into arguments"),
    (["-H", "a,,b"], "-H 'a,,b' has an empty entry between commas"),
    (["-H", "localhost:2,"], "-H 'localhost:2,' has an empty entry between commas"),
    (["-H", "node[1-100000000]"], "names more than 65536 hosts"),
    (["--export-config", "/no-such-folder-here/job.toml"],
     "--export-config '/no-such-folder-here/job.toml': the folder '/no-such-folder-here' does "
     "not exist"),
])
def test_bad_values_are_one_sentence_and_exit_2(args, words):
    refused(*args, "true", words=words)


def test_unbalanced_quote_is_refused_for_the_mpi_backend_too():
    refused("-np", "2", "--backend", "mpi", "--mpi-global-args", "'abc", "true",
            words="cannot be split into arguments (No closing quotation)")


@pytest.mark.parametrize("content, words", [
    (random.Random(7).randbytes(64) + b"\xff\xfe", "is not a text file"),
    (b"localhost slots=2\n\0\0\n", "is not a text file"),
    (b"a" * (1 << 20) + b"\n", "is larger than 1 MiB"),
], ids=["random-bytes", "nul-bytes", "over-1-MiB"])
def test_binary_or_huge_hostfile(tmp_path, content, words):
    hostfile = tmp_path / "hosts"
    hostfile.write_bytes(content)
    refused("--hostfile", str(hostfile), "true", words=f"--hostfile '{hostfile}' {words}")


def test_device_as_hostfile_does_not_hang():
    refused("--hostfile", "/dev/zero", "true", words="is larger than 1 MiB")


@pytest.mark.parametrize("line, words", [
    ("num-instances = [1, 2]", "num-instances = [1, 2] is not a whole number"),
    ("num-instances = 2.5", "num-instances = 2.5 is not a whole number"),
    ("num-instances = true", "num-instances = True is not a whole number"),
    ("output-dir = 5", "output-dir = 5 is not a string in quotes"),
    ("hostfile = [\"a\"]", "hostfile = ['a'] is not a string in quotes"),
    ("start-timeout = nan", "start-timeout = nan is not a finite number"),
    ("grace-period = inf", "grace-period = inf is not a finite number"),
    ("grace-period = \"10\"", "grace-period = '10' is not a finite number"),
    ("tag-output = \"no\"", "tag-output = 'no' is not true or false"),
    ("env = \"A=1\"", "env = 'A=1' is not a list of strings"),
    ("env = [1]", "env = [1] is not a list of strings"),
    ("ssh-port = \"22\"", "ssh-port = '22' is not a whole number"),
    ("max-restarts = {a = 1}", "max-restarts = {'a': 1} is not a whole number"),
])
def test_config_values_of_the_wrong_type(tmp_path, line, words):
    config = tmp_path / "job.toml"
    config.write_text(line + "\n")
    refused("--config", str(config), "true", words=f"config file '{config}': {words}")


def test_config_values_are_checked_like_the_command_line(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("num-instances: 0\n")
    refused("--config", str(config), "true", words="--num-instances must be at least 1, got 0")
    config.write_text("grace-period: 1.0e+30\n")
    refused("--config", str(config), "true", words="--grace-period 1e+30 is not a usable number")


@pytest.mark.parametrize("name, value, words", [
    ("POPRUN_GRACE_PERIOD", "nan", "--grace-period nan is not a usable number of seconds"),
    ("POPRUN_START_TIMEOUT", "-inf", "--start-timeout -inf is not a usable number of seconds"),
    ("POPRUN_NUM_INSTANCES", "2.5", "'2.5' is not a valid integer"),
    ("POPRUN_NUM_INSTANCES", "0", "--num-instances must be at least 1, got 0"),
    ("POPRUN_TAG_OUTPUT", "perhaps", "'perhaps' is not a valid boolean"),
    ("POPRUN_TF1", "maybe", "'maybe' is not a valid boolean"),
    ("POPRUN_TF_CONFIG", "master", "'master' is not one of 'auto', 'worker', 'chief', 'none'"),
    ("POPRUN_MPI_GLOBAL_ARGS", "'x", "cannot be split into arguments"),
])
def test_environment_variables_of_the_wrong_type(name, value, words):
    refused("true", env=dict(os.environ, **{name: value}), words=words)


def test_valid_values_still_run(tmp_path):
    exported = tmp_path / "job.toml"
    result = poprun("-np", "2", "--backend", "local", "--grace-period", "0", "--start-timeout",
                    "604800", "--mpi-global-args", "--mca btl 'tcp,self'", "--export-config",
                    str(exported), "true", timeout=60)
    assert result.returncode == 0, result.stderr
    again = poprun("--config", str(exported), "true", timeout=60)
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("name, content, words", [
    ("job.toml", b"\x81\x00num-instances = 2\n", "is not a text file"),
    ("job.yaml", b"\xff\xfe\x00\x01", "is not a text file"),
    ("job.yaml", b"num-instances: !!python/object:os.system [ls]\n",
     "could not be parsed: could not determine a constructor for the tag"),
    ("job.toml", b"num-instances = \n", "could not be parsed: Invalid value (at line 1"),
])
def test_unreadable_config_files(tmp_path, name, content, words):
    config = tmp_path / name
    config.write_bytes(content)
    refused("--config", str(config), "true", words=f"config file '{config}' {words}")
