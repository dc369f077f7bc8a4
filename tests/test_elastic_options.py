"""Elastic options through the real CLI: bad values and bad discovery scripts get one sentence
and exit code 2 with nothing left running; config files and POPRUN_* variables spell them; the
elastic mode is read from the program's source."""
import os
import time

import pytest

from conftest import poprun, wait_gone
from popdist_launcher.launcher.elastic import kind as elastic_kind


def refused(result, *words):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("args, words", [
    (["--min-np", "0"], ["--min-np must be at least 1 (got 0)"]),
    (["--min-np", "4", "--max-np", "2"], ["--min-np 4 is above --max-np 2", "raise --max-np"]),
    (["-np", "6", "--min-np", "2", "--max-np", "4"],
     ["-np 6 is outside --min-np 2 .. --max-np 4"]),
    (["--min-np", "2", "--backend", "mpi"], ["need Gloo", "MPI world is fixed", "--backend ssh"]),
    (["--min-np", "1", "--max-restarts", "2"], ["--max-restarts is for fixed worlds",
                                                "--reset-limit"]),
    (["--min-np", "1", "--evaluator"], ["--evaluator needs a fixed cluster"]),
    (["--reset-limit", "3"], ["--reset-limit only applies to elastic jobs", "--min-np"]),
    (["--elastic-timeout", "5", "--slots-per-host", "2"],
     ["--slots-per-host, --elastic-timeout only apply to elastic jobs"]),
    (["--min-np", "1", "--blacklist-cooldown-range", "0", "50"],
     ["--blacklist-cooldown-range 0 50", "at least 1 s", "at most 3600 s"]),
    (["--min-np", "1", "--slots-per-host", "0"], ["--slots-per-host must be at least 1"]),
    (["--min-np", "1", "--reset-limit", "-1"], ["--reset-limit must be 0 or more"]),
    (["--min-np", "1", "--elastic-timeout", "0"], ["--elastic-timeout 0.0 is not a usable"]),
    (["--min-np", "1", "-H", "a,b", "--host-discovery-script", "x"],
     ["-H and --host-discovery-script both name hosts"]),
    (["-np", "4", "--min-np", "2", "-H", "a:1,b:1"], ["offer 2 slot(s)", "-np 4"]),
    (["--min-np", "1", "--hang-timeout", "-1"], ["--hang-timeout -1.0 is not a usable number",
                                                 "0 or more"]),
])
def test_bad_elastic_options_get_one_sentence(args, words):
    refused(poprun(*args, "true"), *words)


def script(tmp_path, body, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\necho $$ > " + str(tmp_path / "script.pid") + "\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body, words", [
    ("echo oops >&2; exit 3", ["exited with 3", "oops", "must exit 0"]),
    ("echo hostA:2; echo a:b:c", ["printed 'a:b:c' on line 2", "'host:slots'"]),
    ("echo hostA:0", ["printed 'hostA:0' on line 1"]),
    ("true", ["printed no hosts"]),
    ("sleep 60", ["did not finish within 2 s", "must print the current hosts and exit"]),
])
def test_a_bad_discovery_script_gets_one_sentence_and_leaves_nothing(tmp_path, body, words):
    start = time.monotonic()
    result = poprun("--min-np", "1", "--start-timeout", "2", "--host-discovery-script",
                    script(tmp_path, body), "true", timeout=60)
    refused(result, "discover.sh", *words)
    assert time.monotonic() - start < 30
    pid = int((tmp_path / "script.pid").read_text())
    assert wait_gone([pid], timeout=5) == []


def test_a_discovery_script_that_cannot_run_is_named(tmp_path):
    path = tmp_path / "d.sh"
    path.write_text("#!/bin/sh\necho localhost\n")  # not executable
    refused(poprun("--min-np", "1", "--host-discovery-script", str(path), "true"),
            "cannot be run", "chmod +x")
    refused(poprun("--min-np", "1", "--host-discovery-script", str(tmp_path / "missing.sh"),
                   "true"), "cannot be run")


def test_config_files_and_environment_spell_the_elastic_options(tmp_path):
    config = tmp_path / "elastic.toml"
    config.write_text("min-np = 2\nmax-np = 3\nblacklist-cooldown-range = [2, 5]\n"
                      "elastic-timeout = 7.5\nreset-limit = 4\nhang-timeout = 45\n")
    exported = tmp_path / "out.toml"
    result = poprun("--config", str(config), "--export-config", str(exported),
                    "--print-topology", "true")
    assert result.returncode == 0, result.stderr
    text = exported.read_text()
    for line in ("min-np = 2", "max-np = 3", "elastic-timeout = 7.5", "reset-limit = 4",
                 "hang-timeout = 45"):
        assert line in text
    assert "blacklist-cooldown-range = [" in text
    env = {**os.environ, "POPRUN_MIN_NP": "1", "POPRUN_BLACKLIST_COOLDOWN_RANGE": "0 9"}
    refused(poprun("true", env=env), "--blacklist-cooldown-range 0 9")
    refused(poprun("true", env={**os.environ, "POPRUN_HANG_TIMEOUT": "nan"}),
            "--hang-timeout nan is not a usable number of seconds")
    config.write_text("min-np = 1\nblacklist-cooldown-range = 5\n")
    result = poprun("--config", str(config), "true")
    assert result.returncode == 2 and "a list of two whole numbers" in result.stderr


@pytest.mark.parametrize("source, mode", [
    ("import horovod.tensorflow as hvd\n@hvd.elastic.run\ndef train(state): pass\n", "horovod"),
    ("from horovod.tensorflow.keras import elastic\n", "horovod"),
    ("import horovod.tensorflow.keras.elastic\n", "horovod"),
    ("import horovod.tensorflow as hvd\nhvd.init()\n", "restart"),
    ("import helpers\n", "horovod"),  # a module beside the program uses hvd.elastic
])
def test_the_elastic_mode_is_read_from_the_programs_source(tmp_path, source, mode):
    (tmp_path / "helpers.py").write_text("state = hvd.elastic.ObjectState()\n")
    program = tmp_path / "train.py"
    program.write_text(source)
    assert elastic_kind.detect(["python", str(program)]) == mode
    assert elastic_kind.detect(["/bin/true"]) == "restart"
