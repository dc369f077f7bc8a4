"""Elastic membership (launcher/elastic/membership.py, launcher/elastic/discovery/): the host
discovery script's answers (strict parsing, real scripts that fail, hang or print garbage, nothing
left running), the blacklist's cooldown maths, the periodic poller and the membership log."""
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import alive, wait_gone
from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.elastic.discovery import script as ds
from popdist_launcher.launcher.elastic.discovery import poller as d
from popdist_launcher.launcher.elastic import membership as m

EXPECTED = "'host' or 'host:slots'"


def write_script(folder, name, body, executable=True):
    path = folder / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    if executable:
        path.chmod(0o755)
    return path


def write_atomically(path, text):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def pids_in(path):
    return [int(word) for word in path.read_text().split()] if path.exists() else []


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for a condition")


# --- parsing -------------------------------------------------------------------------------

def test_parse_keeps_order_and_skips_comments_and_blank_lines():
    text = "# hosts of the job\n\n  hostB:2  \nhostA\n\t# hostC:4\n10.0.0.3:3\r\nhost_d.example-1\n"
    assert ds.parse_hosts(text, 2, "./d.sh") == [
        ("hostB", 2), ("hostA", 2), ("10.0.0.3", 3), ("host_d.example-1", 2)]


def test_parse_repeated_host_keeps_its_first_position_and_its_last_slots():
    assert ds.parse_hosts("hostA:1\nhostB:2\nhostA:4\nhostB\n", 3, "d") == [
        ("hostA", 4), ("hostB", 3)]


def test_parse_ipv6_in_brackets():
    text = "[::1]:2\n[fe80::1]\n[0:0::1]:5\n"
    assert ds.parse_hosts(text, 1, "d") == [("::1", 5), ("fe80::1", 1)]


def test_parse_nothing_is_no_hosts():
    assert ds.parse_hosts("# none yet\n\n", 1, "d") == []


@pytest.mark.parametrize("line", [
    "a:b:c", "hostA:0", "hostA:-1", "hostA:x", "hostA:", "hostA:2.0", ":2", "two words:2",
    "[::1", "[not-an-address]:2", "[::1]:0", "::1", "fe80::1:2", "user@hostA", "hostA:2:3",
])
def test_parse_garbage_is_one_sentence_naming_the_line(line):
    with pytest.raises(ds.DiscoveryError) as err:
        ds.parse_hosts(f"# first\nhostA:2\n{line}\nhostB\n", 1, "./d.sh")
    text = str(err.value)
    assert err.value.kind == "garbage"
    assert f"./d.sh printed '{line}' on line 3" in text
    assert EXPECTED in text and "positive integer" in text
    assert text.endswith(".") and text.count(". ") == 0 and "\n" not in text


def test_parse_shortens_a_long_garbage_line():
    with pytest.raises(ds.DiscoveryError) as err:
        ds.parse_hosts("x" * 300 + ":y", 1, "d")
    assert "'" + "x" * 57 + "...'" in str(err.value) and len(str(err.value)) < 200


# --- one run of the script ---------------------------------------------------------------

def test_run_discovery_through_the_shell_in_both_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", """\
        echo "# hosts"
        echo hostB:2
        echo hostA
        """)
    (tmp_path / "d.py").write_text("print('hostC:3')\nprint('[::1]')\n")
    assert ds.run_discovery("./d.sh", 4) == [("hostB", 2), ("hostA", 4)]
    assert ds.run_discovery(f"{shlex.quote(sys.executable)} d.py", 1) == [("hostC", 3), ("::1", 1)]
    assert ds.run_discovery("HOSTS=x ./d.sh", 1, timeout=30) == [("hostB", 2), ("hostA", 1)]


def test_run_discovery_exit_code_and_last_stderr_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", """\
        echo hostA
        echo "first complaint" >&2
        echo "  no inventory service  " >&2
        exit 3
        """)
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery("./d.sh", 1)
    assert err.value.kind == "exit"
    assert str(err.value) == (
        "the host discovery script ./d.sh exited with 3 (last stderr line: no inventory "
        "service); it must exit 0 and print 'host' or 'host:slots' lines.")


def test_run_discovery_a_command_failing_inside_the_script_is_not_unrunnable(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", "no-such-command-here\n")
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery("./d.sh", 1)
    assert err.value.kind == "exit"
    assert "exited with 127" in str(err.value) and "no-such-command-here" in str(err.value)


def test_run_discovery_hang_is_killed_with_everything_it_started(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", """\
        echo $$ > shell.pid
        sleep 600 &
        echo $! > sleep.pid
        echo hostA
        wait
        """)
    began = time.monotonic()
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery("./d.sh", 1, timeout=1)
    assert time.monotonic() - began < 300  # not the script's 600 s
    assert err.value.kind == "timeout"
    assert str(err.value) == ("the host discovery script ./d.sh did not finish within 1 s; it "
                              "must print the current hosts and exit.")
    pids = pids_in(tmp_path / "shell.pid") + pids_in(tmp_path / "sleep.pid")
    assert len(pids) == 2
    assert wait_gone(pids) == []  # SIGKILL went to the script's whole process group


def test_run_discovery_kills_what_the_script_left_in_the_background(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", """\
        sleep 600 > /dev/null 2>&1 &
        echo $! > sleep.pid
        echo hostA:2
        """)
    assert ds.run_discovery("./d.sh", 1, timeout=30) == [("hostA", 2)]
    pids = pids_in(tmp_path / "sleep.pid")
    assert len(pids) == 1 and wait_gone(pids) == []


def test_run_discovery_garbage_and_empty(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "g.sh", "echo hostA:2\necho a:b:c\n")
    write_script(tmp_path, "e.sh", "echo '# nobody yet'\n")
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery("./g.sh", 1)
    assert err.value.kind == "garbage"
    assert "./g.sh printed 'a:b:c' on line 2" in str(err.value)
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery("./e.sh", 1)
    assert err.value.kind == "empty"
    assert str(err.value).startswith("the host discovery script ./e.sh printed no hosts; ")
    assert EXPECTED in str(err.value)


@pytest.mark.parametrize("command, reason", [
    ("./noexec.sh", "Permission denied"),
    ("./missing.sh", "No such file or directory"),
    ("no-such-discovery-command", "no command 'no-such-discovery-command' on PATH"),
    ("./sub", "Is a directory"),
])
def test_run_discovery_cannot_be_run(tmp_path, monkeypatch, command, reason):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "noexec.sh", "echo hostA\n", executable=False)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ds.DiscoveryError) as err:
        ds.run_discovery(command, 1)
    text = str(err.value)
    assert err.value.kind == "unrunnable"
    assert text.startswith(f"--host-discovery-script {command} cannot be run: {reason}")
    assert text.endswith("; give an executable file (chmod +x) or a command such as "
                         "'python d.py'.")


# --- blacklist ---------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeRng:
    def __init__(self, *values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_blacklist_cooldown_doubles_within_its_range():
    clock = FakeClock()
    blacklist = m.Blacklist((2, 40), clock=clock, rng=FakeRng(0.0, 0.5, 0.25, 0.9, 0.0))
    cooldowns = []
    for _ in range(5):
        cooldowns.append(blacklist.add("hostB"))
        assert blacklist.blocked("hostB") and not blacklist.blocked("hostA")
        clock.now += cooldowns[-1] - 0.001
        assert blacklist.blocked("hostB")
        clock.now += 0.001
        assert not blacklist.blocked("hostB")
        assert blacklist.returned() == ["hostB"] and blacklist.returned() == []
    # Horovod's HostState: the n-th blacklisting waits low * 2**n + U(0,1) * low, at most high
    assert cooldowns == [2 * 2 + 0.0, 2 * 4 + 0.5 * 2, 2 * 8 + 0.25 * 2, 2 * 16 + 0.9 * 2, 40]


def test_blacklist_again_during_a_cooldown_changes_nothing():
    clock = FakeClock()
    blacklist = m.Blacklist((1, 3600), clock=clock, rng=FakeRng(0.5, 0.0))
    assert blacklist.add("hostB") == 2.5
    clock.now += 1.0
    assert blacklist.add("hostB") == 1.5  # what is left of the first cooldown
    clock.now += 1.5
    assert not blacklist.blocked("hostB")
    assert blacklist.add("hostB") == 4.0  # the second blacklisting: 1 * 2**2 + 0


def test_blacklist_bounds_and_default_rng():
    clock = FakeClock()
    assert m.Blacklist((5, 8), clock=clock, rng=FakeRng(0.0)).add("h") == 8  # 10 > high
    assert m.Blacklist((1, 1), clock=clock, rng=FakeRng(0.99)).add("h") == 1
    blacklist = m.Blacklist((3, 3600), clock=clock)
    first = [blacklist.add(f"host{i}") for i in range(50)]
    assert all(6 <= c <= 9 for c in first) and len(set(first)) > 1


def test_blacklist_without_a_range_is_for_the_rest_of_the_job():
    clock = FakeClock()
    blacklist = m.Blacklist(None, clock=clock)
    assert blacklist.add("hostB") is None
    assert blacklist.add("hostB") is None
    clock.now += 1e9
    assert blacklist.blocked("hostB") and blacklist.returned() == []


def test_blacklist_returned_in_the_order_of_blacklisting():
    clock = FakeClock()
    blacklist = m.Blacklist((1, 1), clock=clock, rng=FakeRng(0.0, 0.0, 0.0))
    for host in ("hostC", "hostA", "hostB"):
        blacklist.add(host)
    assert blacklist.returned() == []
    clock.now += 1
    assert blacklist.returned() == ["hostC", "hostA", "hostB"]


# --- membership ---------------------------------------------------------------------------

def good(*hosts):
    return d.Answer(list(hosts), None, "ok")


def test_membership_changes_order_and_blacklist():
    clock = FakeClock()
    blacklist = m.Blacklist((1, 1), clock=clock, rng=FakeRng(0.0))
    members = m.Membership([("hostA", 2), ("hostB", 2)], blacklist)
    assert members.usable() == [("hostA", 2), ("hostB", 2)]
    # a new host comes after the older ones, wherever the script prints it
    assert members.on_answer(good(("hostC", 1), ("hostA", 2), ("hostB", 2))) == (
        ["hostC"], [], None)
    assert members.usable() == [("hostA", 2), ("hostB", 2), ("hostC", 1)]
    assert members.on_answer(good(("hostA", 4), ("hostB", 1), ("hostC", 1))) == (
        ["hostA"], ["hostB"], None)  # more slots: added; fewer slots: removed
    assert members.on_answer(good(("hostA", 4), ("hostB", 1))) == ([], ["hostC"], None)
    assert members.hosts == [("hostA", 4), ("hostB", 1)]
    # blacklisted: out of usable() at once; it comes back last, when its cooldown ends
    blacklist.add("hostA")
    assert members.usable() == [("hostB", 1)]
    assert members.on_answer(good(("hostA", 4), ("hostB", 1))) == ([], [], None)
    clock.now += 1
    assert members.on_answer(good(("hostA", 4), ("hostB", 1))) == (["hostA"], [], None)
    assert members.usable() == [("hostB", 1), ("hostA", 4)]


def test_membership_a_failed_answer_keeps_the_last_good_one_and_warns_once_per_kind():
    members = m.Membership([("hostA", 1)], m.Blacklist(None))
    exit_ = d.Answer(None, "the script exited with 3.", "exit")
    hang = d.Answer(None, "the script did not finish.", "timeout")
    assert members.on_answer(exit_) == ([], [], "the script exited with 3.")
    assert members.on_answer(exit_) == ([], [], None)
    assert members.on_answer(hang) == ([], [], "the script did not finish.")
    assert members.on_answer(d.Answer(None, "no hosts", "empty")) == ([], [], "no hosts")
    assert members.on_answer(exit_) == ([], [], None)
    assert members.hosts == [("hostA", 1)] and members.usable() == [("hostA", 1)]
    assert members.on_answer(good(("hostA", 1), ("hostB", 1))) == (["hostB"], [], None)
    assert members.on_answer(exit_) == ([], [], "the script exited with 3.")  # warned again


# --- the poller: a real discovery process ------------------------------------------------

POLLED = """\
    echo $$ >> runs.pid
    if [ -f hang ]; then sleep 600 & echo $! > sleep.pid; wait; fi
    if [ -f fail ]; then echo "inventory down" >&2; exit 3; fi
    cat hosts.txt
    """


def next_answers(poller, timeout=60.0):
    """Block (bounded) until the poller has at least one answer; return them."""
    with selectors.DefaultSelector() as sel:
        sel.register(poller.fileno(), selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sel.select(max(0.0, deadline - time.monotonic()))
            answers = poller.read()
            if answers:
                return answers
    raise AssertionError("no answer from the discovery process")


def next_answer_where(poller, predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for answer in next_answers(poller):
            if predicate(answer):
                return answer
    raise AssertionError("no such answer from the discovery process")


@pytest.fixture
def polled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "d.sh", POLLED)
    write_atomically(tmp_path / "hosts.txt", "hostA:2\nhostB:2\n")
    return tmp_path


def test_poller_answers_changes_and_failures(polled):
    poller = d.Poller("./d.sh", 1, interval=0.1, timeout=30)
    poller.start()
    try:
        members = m.Membership(ds.run_discovery("./d.sh", 1), m.Blacklist(None))
        first = next_answers(poller)[0]
        assert first == ([("hostA", 2), ("hostB", 2)], None, "ok")
        assert members.on_answer(first) == ([], [], None)

        write_atomically(polled / "hosts.txt", "hostA:2\nhostC:1\n")
        answer = next_answer_where(poller, lambda a: a.hosts != [("hostA", 2), ("hostB", 2)])
        assert answer == ([("hostA", 2), ("hostC", 1)], None, "ok")
        assert members.on_answer(answer) == (["hostC"], ["hostB"], None)

        (polled / "fail").touch()
        failed = next_answer_where(poller, lambda a: a.kind != "ok")
        assert failed.hosts is None and failed.kind == "exit"
        assert "exited with 3 (last stderr line: inventory down)" in failed.error
        assert members.on_answer(failed) == ([], [], failed.error)
        again = next_answer_where(poller, lambda a: True)
        assert again == failed and members.on_answer(again) == ([], [], None)  # one warning
        assert members.usable() == [("hostA", 2), ("hostC", 1)]  # the last good answer

        (polled / "fail").unlink()
        write_atomically(polled / "hosts.txt", "hostA:2\na:b:c\n")
        garbage = next_answer_where(poller, lambda a: a.kind == "garbage")
        assert "printed 'a:b:c' on line 2" in garbage.error
        assert members.on_answer(garbage) == ([], [], garbage.error)

        write_atomically(polled / "hosts.txt", "hostB:1\nhostA:2\n")
        back = next_answer_where(poller, lambda a: a.kind == "ok")
        assert members.on_answer(back) == (["hostB"], ["hostC"], None)
        assert members.usable() == [("hostA", 2), ("hostB", 1)]
        child = poller.pid
    finally:
        poller.close()
    assert wait_gone([child] + pids_in(polled / "runs.pid")) == []
    assert poller.fileno() == -1


def test_poller_close_during_a_hanging_run_leaves_nothing_running(polled):
    (polled / "hang").touch()
    poller = d.Poller("./d.sh", 1, interval=0.1, timeout=600)
    poller.start()
    try:
        wait_for(lambda: pids_in(polled / "sleep.pid"))
        assert poller.read() == []  # the run in progress has not answered
        child = poller.pid
    finally:
        poller.close()
    # close() reaped the discovery process; it had killed the script's process group
    assert not alive(child)
    assert wait_gone(pids_in(polled / "runs.pid") + pids_in(polled / "sleep.pid")) == []


def test_poller_starts_a_new_discovery_process_when_its_own_ends(polled):
    poller = d.Poller("./d.sh", 1, interval=0.1, timeout=30)
    poller.start()
    try:
        next_answers(poller)
        first = poller.pid
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not alive(first))
        ended = next_answer_where(poller, lambda a: a.kind == "poller")
        assert ended.hosts is None
        assert ended.error == (f"the host discovery process (pid {first}) was killed by "
                               f"SIGKILL; started a new one.")
        assert poller.pid != first
        assert next_answer_where(poller, lambda a: a.kind == "ok").hosts == [
            ("hostA", 2), ("hostB", 2)]
        second = poller.pid
    finally:
        poller.close()
    assert wait_gone([first, second]) == []


def test_discovery_process_ends_with_its_parent_and_kills_its_script(polled):
    (polled / "hang").touch()
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from popdist_launcher.launcher.elastic.discovery.poller import Poller\n"
         "poller = Poller('./d.sh', 1, interval=0.1, timeout=600)\n"
         "poller.start()\n"
         "print(poller.pid, flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        wait_for(lambda: pids_in(polled / "sleep.pid"))
        parent.kill()
        parent.wait()
        assert wait_gone([child] + pids_in(polled / "runs.pid")
                         + pids_in(polled / "sleep.pid"), timeout=60) == []
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


# --- the membership log --------------------------------------------------------------------

@pytest.fixture
def said():
    """What the launcher's console writes, line by line."""
    lines = []
    console.attach(lines.append)
    yield lines
    console.detach(lines.append)


def test_membership_log_console_and_file(tmp_path, said):
    log = m.MembershipLog(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    log.record("hostB removed by the discovery script")
    log.record("round 2: 4 instances on hostA, hostC")
    assert len(said) == 2
    assert re.fullmatch(r"poprun-lite: \[\d\d:\d\d:\d\d\.\d{3}\] hostB removed by the discovery "
                        r"script", said[0])
    lines = (tmp_path / "out" / "membership.log").read_text().splitlines()
    assert len(lines) == 2
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d"
    assert re.fullmatch(iso + r" hostB removed by the discovery script", lines[0])
    assert re.fullmatch(iso + r" round 2: 4 instances on hostA, hostC", lines[1])
    assert said[0].split("[")[1][:12] == lines[0][11:23]  # one time for both


def test_membership_log_without_output_dir_only_says(tmp_path, monkeypatch, said):
    monkeypatch.chdir(tmp_path)
    m.MembershipLog(None).record("hostA blacklisted for the rest of the job")
    assert said[0].endswith("] hostA blacklisted for the rest of the job")
    assert list(tmp_path.iterdir()) == []
