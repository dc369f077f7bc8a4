"""The fast layer under the supervision tests: the wire format, output routing, log files, the
ssh and mpirun command lines, the supervisor's parts (connection hub, stdin forwarding, stack
collection, instance states, a wrapper's hello) and the supervisor driven by stand-in engines
(real processes, no TensorFlow)."""
import hashlib
import hmac
import os
import pty
import selectors
import shlex
import signal
import socket
import sys

import pytest

from popdist_launcher.launcher.output import routing as out, report
from popdist_launcher.launcher.layout.backends.base import WRAPPER_CODE, Backend, Launch, Wiring
from popdist_launcher.launcher.layout.backends.mpi import MpiBackend
from popdist_launcher.launcher.layout.backends.ssh import SshBackend
from popdist_launcher.launcher.supervision.hub import Hub
from popdist_launcher.wire import protocol as p
from popdist_launcher.launcher.supervision.attempt import JobState
from popdist_launcher.launcher.supervision.supervisor import Supervisor
from popdist_launcher.launcher.layout.plan import Host, build_plan
from popdist_launcher.launcher.layout.remote import SshOptions
from popdist_launcher.launcher.supervision.stacks import StackCollector
from popdist_launcher.launcher.supervision.stdin_forward import StdinForwarder


# ---- the wire format -------------------------------------------------------------------------
def test_frames_survive_any_split():
    frames = [(p.STDOUT, b"a" * 1000), (p.EXIT, b"-9"), (p.STDERR, b""), (p.STACKS, b"x\ny")]
    stream = b"".join(p.frame(k, v) for k, v in frames)
    for cut in range(len(stream) + 1):
        reader = p.FrameReader()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == frames
    reader = p.FrameReader()
    assert reader.take(stream) == frames[0] and reader.take() == frames[1]


def test_spec_round_trip_keeps_any_bytes_but_nul():
    argv = ["python", "a b", "é", "x" * 131000, "\udcff"]
    env = {"A": "1=2", "EMPTY": "", "UNI": "ü"}
    spec = p.decode_spec(p.encode_spec(argv, env, "/some dir", True))
    assert spec == {"argv": argv, "env": env, "cwd": "/some dir", "stdin": True}
    assert p.decode_spec(p.encode_spec(argv, env, "/", False, run=False))["argv"] is None


def test_mac_is_rfc_2104_hmac_sha256():
    for secret in (b"k", b"0123456789abcdef" * 2, b"z" * 100):
        assert p.mac(secret, b"challenge", 7) == \
            hmac.new(secret, b"challenge7", hashlib.sha256).hexdigest()
        assert p.mac_ok(secret, b"challenge", 7, p.mac(secret, b"challenge", 7))
        assert not p.mac_ok(secret, b"challenge", 6, p.mac(secret, b"challenge", 7))
        assert not p.mac_ok(secret, b"other", 7, p.mac(secret, b"challenge", 7))


# ---- output routing --------------------------------------------------------------------------
class Console:
    def __init__(self):
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.fds = (out_w, err_w)

    def read(self):
        for fd in self.fds:
            os.close(fd)
        return tuple(_read_all(fd) for fd in (self.out_r, self.err_r))


def _read_all(fd):
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            os.close(fd)
            return b"".join(chunks)
        chunks.append(data)


def test_partial_lines_stay_with_their_instance(tmp_path):
    console = Console()
    root = out.open_output_dir(str(tmp_path / "logs"))
    router = out.Router(2, out.OutputOptions(), out.LogFiles(root, str(tmp_path / "logs"), 0),
                        console=console.fds)
    router.feed(0, "stdout", b"zero starts ")
    router.feed(1, "stdout", b"one starts ")
    router.feed(1, "stdout", b"and ends\nsecond")
    router.feed(0, "stdout", b"\rprogress\rdone\n")
    router.feed(1, "stderr", b"\x00\xff binary\n")
    router.close_all()
    os.close(root)
    stdout, stderr = console.read()
    assert stdout == (b"[1]<stdout>:one starts and ends\n"
                      b"[0]<stdout>:zero starts \rprogress\rdone\n"
                      b"[1]<stdout>:second\n")
    assert stderr == b"[1]<stderr>:\x00\xff binary\n"
    log = tmp_path / "logs" / "attempt-0"
    assert (log / "instance-0.stdout.log").read_bytes() == b"zero starts \rprogress\rdone\n"
    assert (log / "instance-1.stdout.log").read_bytes() == b"one starts and ends\nsecond"
    assert router.tail(0, "stdout") == ["done"]  # what a terminal shows of that line
    assert router.tail(1, "stdout") == ["one starts and ends", "second"]


def test_tail_keeps_the_last_lines_and_only_instance_filters_the_console():
    console = Console()
    router = out.Router(2, out.OutputOptions(only_instance=1, tail_lines=3), console=console.fds)
    router.feed(0, "stderr", b"".join(b"line %d\n" % n for n in range(10)))
    router.feed(1, "stderr", b"shown\n")
    router.close_all()
    assert console.read() == (b"", b"[1]<stderr>:shown\n")
    assert router.tail(0, "stderr") == ["line 7", "line 8", "line 9"]


def test_a_console_pipe_whose_reader_has_gone_is_noted_and_its_lines_dropped():
    # `| head`: the write fails with EPIPE (Python ignores SIGPIPE); the supervisor stops the
    # job on reader_gone. The other stream, which still has its reader, keeps getting lines.
    read_out, write_out = os.pipe()
    console = Console()
    os.close(read_out)
    router = out.Router(1, out.OutputOptions(), console=(write_out, console.fds[1]))
    router.feed(0, "stderr", b"to stderr\n")
    assert not router.reader_gone
    router.feed(0, "stdout", b"to the closed pipe\n")
    assert router.reader_gone
    router.feed(0, "stderr", b"still shown\n")
    router.close_all()
    os.close(write_out)
    assert console.read()[1] == b"[0]<stderr>:to stderr\n[0]<stderr>:still shown\n"


def test_an_engines_noise_is_logged_and_never_on_the_console(tmp_path):
    # PRRTE's ssh launcher's setpgid race (seen in CI): the line says nothing about the job.
    race = "[vm:08971] plm:ssh: Warning: setpgid(8975,8975) failed in parent with " \
           "errno=Permission denied(13)"
    assert any(noise in race for noise in MpiBackend.engine_noise)
    assert not any(noise in "ORTE was unable to reliably start one or more daemons."
                   for noise in MpiBackend.engine_noise)
    console = Console()
    root = out.open_output_dir(str(tmp_path / "logs"))
    router = out.Router(1, out.OutputOptions(), out.LogFiles(root, str(tmp_path / "logs"), 0),
                        console=console.fds)
    router.engine_line("mpirun", race, noise=True)
    router.engine_line("mpirun", "a real complaint")
    router.close_all()
    os.close(root)
    assert console.read() == (b"", b"[mpirun]: a real complaint\n")
    assert (tmp_path / "logs" / "attempt-0" / "mpirun.log").read_text() == \
        race + "\na real complaint\n"


def test_the_report_names_the_first_python_error_that_left_the_tail():
    # A thread's traceback after the main thread's can push the root cause out of the tail.
    console = Console()
    router = out.Router(1, out.OutputOptions(tail_lines=3), console=console.fds)
    router.feed(0, "stderr", b"Traceback (most recent call last):\n  File \"a.py\", line 1\n"
                             b"    ~~~^^\nRuntimeError: the loop failed at step 3\n")
    router.feed(0, "stderr", b"Traceback (most recent call last):\n  File \"b.py\", line 2\n"
                             b"OSError: the reader stops\n")
    router.close_all()
    assert router.first_error(0) == "RuntimeError: the loop failed at step 3"
    cause = report.Cause("poprun-lite: instance 0 exited with code 1.", instance=0)
    text = report.failure_report(cause, {}, {0: {"stderr": router.tail(0, "stderr"),
                                                 "stdout": []}}, {},
                                 first_errors={0: router.first_error(0)})
    assert "instance 0's first error: RuntimeError: the loop failed at step 3" in text
    assert text.index("first error") < text.index("OSError: the reader stops")


def test_on_a_terminal_a_progress_bar_redraws_in_place():
    leader, follower = pty.openpty()
    router = out.Router(2, out.OutputOptions(), console=(follower, follower))
    router.feed(0, "stdout", b"\r 10%")
    router.feed(0, "stdout", b"\r 50%")
    router.feed(0, "stdout", b"\r100%\n")
    router.feed(1, "stdout", b"partial")
    router.say("poprun-lite: a message")
    router.close_all()
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.close(leader)
    shown = shown.replace(b"\r\n", b"\n")  # the terminal's own newline translation
    # instance 1's unfinished line (no \r: no progress bar) waits for its end, or for the close
    assert shown == (b"[0]<stdout>:\r[0]<stdout>: 10%\r[0]<stdout>: 50%\r[0]<stdout>:100%\n"
                     b"poprun-lite: a message\n[1]<stdout>:partial\n")


def test_on_a_terminal_a_line_written_in_pieces_is_never_split():
    leader, follower = pty.openpty()
    router = out.Router(2, out.OutputOptions(), console=(follower, follower))
    router.feed(0, "stdout", b"instance")
    router.feed(1, "stdout", b"other\n")
    router.feed(0, "stdout", b" 0")
    router.feed(0, "stdout", b" end\nnext")
    assert router.held_deadline is not None
    router.show_held(router.held_deadline)  # instance 0 went quiet: "next" may be a prompt
    assert router.held_deadline is None
    router.feed(1, "stdout", b"more\n")
    router.close_all()
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.close(leader)
    assert shown.replace(b"\r\n", b"\n") == (
        b"[1]<stdout>:other\n[0]<stdout>:instance 0 end\n[0]<stdout>:next\n[1]<stdout>:more\n")


def test_log_files_replace_planted_links_and_never_follow_them(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    logs = tmp_path / "logs"
    (logs / "attempt-0").mkdir(parents=True)
    (logs / "attempt-0" / "instance-0.stdout.log").symlink_to(victim)
    (logs / "attempt-1").symlink_to(tmp_path)
    root = out.open_output_dir(str(logs))
    for attempt in (0, 1):
        files = out.LogFiles(root, str(logs), attempt)
        files.write("instance-0.stdout.log", b"new\n")
        files.close()
        assert (logs / f"attempt-{attempt}" / "instance-0.stdout.log").read_text() == "new\n"
        assert not (logs / f"attempt-{attempt}").is_symlink()
    os.close(root)
    assert victim.read_text() == "precious" and not (tmp_path / "instance-0.stdout.log").exists()


def test_unusable_output_dir_is_one_sentence(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(out.OutputDirError, match=r"a file is in the way.*give a folder"):
        out.open_output_dir(str(tmp_path / "file" / "logs"))


# ---- command lines ---------------------------------------------------------------------------
def _plan(hosts, counts, program=("python", "train.py")):
    return build_plan(program, sum(counts), list(range(20000, 20000 + sum(counts))),
                      ("10.0.0.1", 29500), hosts=hosts, counts=counts)


def test_ssh_command_is_quoted_and_carries_no_secret():
    hosts = (Host("localhost", "10.0.0.1", local=True), Host("node b", "10.0.0.2", local=False))
    plan = _plan(hosts, [1, 1], program=("python", "it's here.py", "$HOME"))
    wiring = Wiring("/tmp/x/launcher.sock", ("10.0.0.1", 4242), 30.0)
    launches = SshBackend(SshOptions(port=2222)).launches(plan, wiring, "s3cr3t")
    assert launches[0] == Launch("instance 0", (0,))  # this host: forked by the launcher
    remote = launches[1]
    assert remote.instances == (1,) and remote.stdin == b"s3cr3t\n"
    assert not any("s3cr3t" in word for word in remote.argv)
    assert remote.argv[remote.argv.index("--") + 1] == "node b"
    words = shlex.split(remote.argv[-1])
    assert words == ["exec", sys.executable, "-c", WRAPPER_CODE.format(""),
                     "--connect", "tcp:10.0.0.1:4242", "--timeout", "30", "--index", "1",
                     "--secret-stdin"]  # the program travels over the wrapper's connection
    assert SshBackend().explain_engine_exit(remote, 255).startswith("lost its ssh session")


def test_mpirun_command_carries_the_secret_only_in_its_environment():
    from popdist_launcher.launcher.layout.hosts import HostSlots
    from popdist_launcher.launcher.layout.backends.mpi import MpiBackend

    backend = MpiBackend([HostSlots("localhost", 4)], [4])
    plan = _plan((Host("localhost", "127.0.0.1"),), [4])
    (launch,) = backend.launches(plan, Wiring("/tmp/s", None, 60.0), "s3cr3t")
    assert launch.instances == (0, 1, 2, 3) and launch.env[p.SECRET_ENV] == "s3cr3t"
    assert "s3cr3t" not in " ".join(launch.argv)
    assert "--output" not in launch.argv  # no tags to parse: output comes from the wrappers
    at = launch.argv.index(p.SECRET_ENV)
    assert launch.argv[at - 1] == "-x"
    assert list(launch.argv[-4:]) == ["--timeout", "60", "--rank-from", "OMPI_COMM_WORLD_RANK"]


def test_wrappers_that_may_be_on_other_hosts_try_tcp_before_the_unix_socket():
    # A Unix socket's path can be reachable from another host sharing the filesystem (network
    # namespaces, containers), and would hide that host's loss from the keepalive.
    assert Wiring("/tmp/s", None, 60.0).addresses() == ["unix:/tmp/s"]
    wiring = Wiring("/tmp/s", ("10.0.0.1", 4242), 60.0)
    assert wiring.addresses() == ["tcp:10.0.0.1:4242", "unix:/tmp/s"]
    assert wiring.addresses(unix=False) == ["tcp:10.0.0.1:4242"]
    from popdist_launcher.launcher.layout.hosts import HostSlots
    from popdist_launcher.launcher.layout.backends.mpi import MpiBackend
    backend = MpiBackend([HostSlots("localhost", 2), HostSlots("node-b", 2)], [2, 2])
    plan = _plan((Host("localhost", "127.0.0.1"), Host("node-b", "10.0.0.2")), [2, 2])
    (launch,) = backend.launches(plan, wiring, "s3cr3t")
    argv = list(launch.argv)
    assert argv[argv.index("--connect") + 1] == "tcp:10.0.0.1:4242,unix:/tmp/s"


# ---- the supervisor with stand-in engines ----------------------------------------------------
class ShellEngine(Backend):
    """An engine that is a shell script: it starts wrappers itself (or fails)."""

    name = "shell-engine"
    start_transients = ("PMIx server's listener thread failed to start",)

    def __init__(self, script):
        self.script = script

    def launches(self, plan, wiring, secret):
        wrapper = " ".join(shlex.quote(w) for w in wiring.wrapper_argv("--index", "$i"))
        script = self.script.replace("WRAPPER", wrapper.replace("'$i'", '"$i"'))
        return [Launch(self.name, tuple(range(plan.num_instances)), ("sh", "-c", script),
                       dict(os.environ, **{p.SECRET_ENV: secret}))]


def _supervise(backend, program, num=2, **kwargs):
    console = Console()
    router = out.Router(num, out.OutputOptions(), console=console.fds)
    plan = build_plan(program, num, list(range(21000, 21000 + num)), ("127.0.0.1", 1),
                      grace_period=kwargs.pop("grace_period", 5.0),
                      start_timeout=kwargs.pop("start_timeout", 30.0))
    supervisor = Supervisor(plan, backend, router, **kwargs)
    result = supervisor.run()
    router.close_all()
    return supervisor, result, console.read()


def test_any_engine_that_starts_wrappers_is_supervised_alike(tmp_path):
    engine = ShellEngine("for i in 0 1; do WRAPPER & done; wait")
    done = tmp_path / "instance-0-done"
    supervisor, result, (stdout, stderr) = _supervise(engine, (
        sys.executable, "-c",
        "import os, sys, time\n"
        "i = os.environ['POPDIST_INSTANCE_INDEX']\n"
        "print('hello from', i, flush=True)\n"
        f"if i == '0': open({str(done)!r}, 'w').close(); sys.exit(0)\n"
        "deadline = time.time() + 30\n"
        f"while not os.path.exists({str(done)!r}) and time.time() < deadline: time.sleep(0.01)\n"
        "sys.exit(3)\n"))
    assert result.state is JobState.FAILED and result.exit_code == 3
    assert result.failed_instance == 1
    assert b"[0]<stdout>:hello from 0\n" in stdout and b"[1]<stdout>:hello from 1\n" in stdout
    assert b"instance 1 exited with code 3 (host localhost)" in stderr


def test_an_engine_failing_before_any_wrapper_connected_is_the_cause():
    # Recorded from Open MPI 5's prterun on a loaded machine.
    engine = ShellEngine("echo \"The PMIx server's listener thread failed to start. We cannot\""
                         " >&2; exit 213")
    supervisor, result, (_, stderr) = _supervise(engine, ("true",))
    assert result.state is JobState.FAILED and result.exit_code == 213
    assert b"shell-engine exited with code 213 before instance(s) 0, 1 started" in stderr
    assert supervisor.engine_failed_to_start()  # a known transient: worth one more start


def test_start_timeout_names_the_instances_that_never_came():
    # Instance 0's wrapper must connect within the bound even on a loaded machine (a 2 s bound
    # once named it too, when its interpreter took longer to start): 6 s.
    engine = ShellEngine("i=0; WRAPPER & sleep 30")
    _, result, (_, stderr) = _supervise(engine, ("sleep", "30"), start_timeout=6.0,
                                        grace_period=1.0)
    assert result.exit_code == 124
    assert b"start timeout (6 s) expired: instances 1 on host(s) localhost did not start" \
        in stderr


def test_sigusr2_is_forwarded_and_the_job_goes_on(tmp_path):
    engine = ShellEngine("for i in 0 1; do WRAPPER & done; wait")
    # Sent once both programs handle SIGUSR2 (each says so with a file): a program still
    # starting would be ended by the signal's default action.
    program = (sys.executable, "-c",
               "import signal, sys, time, os\n"
               "got = []\n"
               "signal.signal(signal.SIGUSR2, lambda *a: got.append(1))\n"
               f"ready = {str(tmp_path)!r}\n"
               "open(os.path.join(ready, os.environ['POPDIST_INSTANCE_INDEX']), 'w').close()\n"
               "deadline = time.time() + 30\n"
               "if os.environ['POPDIST_INSTANCE_INDEX'] == '0':\n"
               "    while len(os.listdir(ready)) < 2 and time.time() < deadline:\n"
               "        time.sleep(0.01)\n"
               "    os.kill(int(os.environ['LAUNCHER_PID']), signal.SIGUSR2)\n"
               "while not got and time.time() < deadline: time.sleep(0.01)\n"
               "print('got USR2' if got else 'no USR2', flush=True)\n")
    os.environ["LAUNCHER_PID"] = str(os.getpid())
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        _, result, (stdout, _) = _supervise(engine, program)
    finally:
        del os.environ["LAUNCHER_PID"]
        signal.signal(signal.SIGUSR2, previous)
    assert result.state is JobState.SUCCEEDED, stdout
    assert stdout.count(b"got USR2") == 2


def test_a_wrapper_runs_nothing_for_a_peer_that_does_not_know_the_secret(tmp_path):
    # Someone listening where the wrapper connects (but without the job's secret) cannot make
    # it run a command.
    import socket
    import subprocess

    path, marker = str(tmp_path / "fake.sock"), tmp_path / "ran"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "popdist_launcher.launcher.spawned.instance", "--connect",
         f"unix:{path}", "--index", "0", "--timeout", "30"], stderr=subprocess.PIPE,
        env={**os.environ, p.SECRET_ENV: "the-real-secret"})
    conn, _ = server.accept()
    conn.sendall(p.frame(p.CHALLENGE, b"c" * 16))
    reader = p.FrameReader()
    hello = None
    while hello is None:
        hello = reader.take(conn.recv(4096))
    theirs = bytes.fromhex(hello[1].decode().split()[4])
    forged = p.mac(b"a-guess", p.LAUNCHER_PROOF + theirs, 0).encode()
    conn.sendall(p.frame(p.SPEC, forged + p.encode_spec(["touch", str(marker)], {}, "/", False)))
    _, err = wrapper.communicate(timeout=30)
    conn.close()
    server.close()
    assert wrapper.returncode != 0 and not marker.exists()
    assert b"does not know the job's secret" in err


# ---- the supervisor's parts: connection hub, stdin forwarding, stack collection --------------
def test_hub_frames_out_and_in_and_ends_cleanly():
    sel = selectors.DefaultSelector()
    hub = Hub(sel, backlog=2)
    path = hub.listen_unix("unit")
    folder = os.path.dirname(path)
    wrapper = socket.socket(socket.AF_UNIX)
    wrapper.connect(path)
    hub.accept(hub.listeners[0])
    (conn,) = hub.conns
    reader = p.FrameReader()
    assert reader.feed(wrapper.recv(4096)) == [(p.CHALLENGE, conn.challenge)]
    big = b"x" * (4 << 20)  # more than the socket takes at once: the rest waits for EVENT_WRITE
    hub.send(conn, p.STDIN, big)
    assert conn.out and sel.get_key(conn.sock).events & selectors.EVENT_WRITE
    got = []
    wrapper.setblocking(False)
    while len(got) < 1:
        hub.write(conn)
        try:
            got += reader.feed(wrapper.recv(1 << 20))
        except BlockingIOError:
            pass
    assert got == [(p.STDIN, big)] and not conn.out
    assert sel.get_key(conn.sock).events == selectors.EVENT_READ
    wrapper.sendall(p.frame(p.STARTED, b"42") + p.frame(p.EXIT, b"0"))
    assert hub.receive(conn) == [(p.STARTED, b"42"), (p.EXIT, b"0")]
    wrapper.close()
    assert hub.receive(conn) is None and conn.closed
    hub.close_all()
    assert not os.path.exists(folder) and not hub.listeners
    sel.close()


class _Inst:
    def __init__(self, index, conn):
        self.index, self.conn = index, conn


def test_stdin_waits_for_instance_0_and_ends_once():
    sel = selectors.DefaultSelector()
    hub = Hub(sel, backlog=1)
    ours, theirs = socket.socketpair()
    target = {"conn": None, "ended": False}
    forwarder = StdinForwarder(sel, hub, lambda: (target["conn"], target["ended"]))
    forwarder.queue.append(b"line 1\n")
    forwarder.eof = True
    forwarder.flush()  # not connected yet: kept
    assert forwarder.queue == [b"line 1\n"]
    target["conn"] = hub.add(ours, 0)
    forwarder.flush()
    forwarder.flush()  # nothing more: EOF went once
    theirs.setblocking(False)
    assert p.FrameReader().feed(theirs.recv(4096)) == [(p.STDIN, b"line 1\n"), (p.STDIN_EOF, b"")]
    target["ended"] = True
    forwarder.queue.append(b"late")
    forwarder.flush()
    assert forwarder.queue == []
    hub.close_all()
    theirs.close()
    sel.close()


class _Collection:
    """A stack collector over ``n`` connected stand-in instances (socket pairs: ``theirs`` are
    the wrappers' ends), its hub and router; ``close`` ends them all."""

    def __init__(self, n):
        self.sel = selectors.DefaultSelector()
        self.hub = Hub(self.sel, backlog=n)
        pairs = [socket.socketpair() for _ in range(n)]
        self.theirs = [theirs for _, theirs in pairs]
        self.insts = [_Inst(i, self.hub.add(ours, i)) for i, (ours, _) in enumerate(pairs)]
        self.console = Console()
        self.router = out.Router(n, out.OutputOptions(), console=self.console.fds)
        self.collector = StackCollector(self.router, self.hub)

    def close(self):
        self.router.close_all()
        self.console.read()
        self.hub.close_all()
        for theirs in self.theirs:
            theirs.close()
        self.sel.close()


def test_stack_collection_waits_for_the_running_and_keeps_a_stall_reporter():
    c = _Collection(3)
    c.router.add_stacks(2, "reporter's own stacks", "stall")
    collector = c.collector
    assert not collector.collect(c.insts, "instance 2 reported a stall", "stall", keep=2)
    assert collector.in_report and collector.deadline is not None
    asked = []
    for i, theirs in enumerate(c.theirs):
        theirs.setblocking(False)
        try:
            if p.FrameReader().feed(theirs.recv(64)) == [(p.DUMP, b"")]:
                asked.append(i)
        except BlockingIOError:
            pass
    assert asked == [0, 1]  # instance 2's own stacks are kept, not asked for again
    assert not collector.on_stacks(0, "stacks of 0")
    collector.ended(1)  # exited meanwhile: not waited for
    assert collector.dump.waiting == set()
    dump = collector.finish()
    assert dump.then == "stall" and collector.dump is None and collector.finish() is None
    assert set(c.router.stacks) == {0, 2}
    c.close()


def test_a_failure_during_a_reports_collection_waits_for_it_and_the_silent_are_named():
    # A stall's reporter fails (exits) at once; stopping the others must wait until their
    # stacks are in, and one that never answers is named as running, not as ended.
    c = _Collection(2)
    collector = c.collector
    stops = []
    collector.after_report(lambda: stops.append("no collection"))
    assert stops == ["no collection"]  # nothing to wait for: at once
    assert not collector.collect(c.insts, "instance 0 reported a stall", "stall")
    collector.after_report(lambda: stops.append("stop"))
    assert stops == ["no collection"]
    assert not collector.on_stacks(0, "stacks of 0")
    collector.done()  # the deadline: instance 1 never answered
    assert stops == ["no collection", "stop"] and collector.unanswered == {1}
    ends = {i: report.InstanceEnd(i, "localhost", 100 + i, -15, "stopped") for i in range(2)}
    text = report.stacks_report(c.router.stacks, ends, collector.unanswered)
    assert "instance 1 (host localhost): running when asked, but its stacks did not arrive" \
        in text and "not running" not in text
    assert collector.collect([], "--timeout", "timeout") and collector.unanswered == set()
    collector.done()
    c.close()


def test_tcp_wrapper_connections_have_keepalive_on_both_ends():
    # A host cut from the network sends nothing: keepalive and the user timeout end the
    # connection after protocol.LOST_AFTER_S on the launcher's side and on the wrapper's.
    from popdist_launcher.launcher.spawned.instance import connect

    sel = selectors.DefaultSelector()
    hub = Hub(sel, backlog=2)
    address, port = hub.listen_tcp("127.0.0.1")
    wrapper = connect([f"tcp:{address}:{port}"], timeout=10)
    hub.accept(hub.listeners[0])
    (conn,) = hub.conns
    for sock in (conn.sock, wrapper):
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == p.KEEPALIVE_IDLE_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == p.KEEPALIVE_INTERVAL_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == p.KEEPALIVE_PROBES
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == p.LOST_AFTER_S * 1000
    wrapper.close()
    hub.close_all()
    sel.close()


# ---- instance states and a wrapper's hello ---------------------------------------------------
def test_instance_states_change_only_along_the_transition_table():
    from popdist_launcher.launcher.supervision.attempt import (INSTANCE_TRANSITIONS, Instance,
                                                               InstanceState)

    states = list(InstanceState)
    for start in states:
        for target in states:
            inst = Instance(3, "hostA")
            inst._state = start  # the starting point only; changes go through to()
            if target is start or target in INSTANCE_TRANSITIONS.get(start, ()):
                inst.to(target)
                assert inst.state is target
            else:
                with pytest.raises(AssertionError, match=f"instance 3 state {start.value} -> "):
                    inst.to(target)
                assert inst.state is start
    inst = Instance(0, "hostA")
    with pytest.raises(AttributeError):
        inst.state = InstanceState.RUNNING  # no raw writes
    for state in (InstanceState.CONNECTED, InstanceState.RUNNING, InstanceState.EXITED):
        inst.to(state)
    assert inst.settled and inst.state is InstanceState.EXITED
    assert INSTANCE_TRANSITIONS.get(InstanceState.EXITED, ()) == ()  # final


def test_a_hello_is_proven_by_the_job_secret_and_the_launchers_challenge():
    secret, challenge, theirs = b"s3cr3t", os.urandom(16), os.urandom(16)

    def hello(index, key=secret, words=None):
        words = words or [str(index), p.mac(key, challenge, index), "hostA", "123", theirs.hex()]
        return " ".join(words).encode()

    assert p.hello_proven(hello(2), secret, challenge, 3) == (2, theirs)
    assert p.hello_proven(hello(3), secret, challenge, 3) is None  # no such instance
    assert p.hello_proven(hello(-1), secret, challenge, 3) is None
    assert p.hello_proven(hello(1, key=b"other"), secret, challenge, 3) is None
    assert p.hello_proven(hello(1), secret, os.urandom(16), 3) is None  # another connection's
    assert p.hello_proven(b"1 abc", secret, challenge, 3) is None
    assert p.hello_proven("1 ü x y z".encode(), secret, challenge, 3) is None
    assert p.hello_proven(hello(1, words=["x", "m", "h", "1", "00"]), secret, challenge, 3) is None
