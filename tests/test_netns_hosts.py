"""The multi-host test harness itself: two network-namespace "hosts" running sshd."""
import os
import shlex
import socket
import subprocess
import sys
import time

import pytest

from conftest import alive as _alive
from netns_hosts import (PREFIX, TestHosts, _b36, cleanup_leftovers, list_links, list_netns,
                         require_test_hosts)


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _ssh(hosts: TestHosts, name: str, command: str, timeout: float = 30):
    return subprocess.run(hosts.ssh_argv(name, command), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    require_test_hosts()
    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path_factory.mktemp("hosts")) as h:
        yield h


def test_layout(hosts):
    import ipaddress

    net = ipaddress.ip_network(hosts.subnet)
    addrs = [hosts.launcher_address, hosts.address("hostA"), hosts.address("hostB")]
    assert len(set(addrs)) == 3 and all(ipaddress.ip_address(a) in net for a in addrs)
    assert net.is_private and str(net).startswith("10.")
    for name in ("hostA", "hostB"):
        assert hosts.netns(name) in list_netns()
        assert _alive(hosts.sshd_pid(name))
    assert all(len(link) <= 15 for link in hosts.created_links())
    for path in (hosts.ssh_config, hosts.identity):
        assert os.stat(path).st_mode & 0o077 == 0


@pytest.mark.parametrize("name", ["hostA", "hostB"])
def test_ssh_lands_in_the_host(hosts, name):
    # `ssh -F config NAME true` works, and the command really runs inside that host's namespace:
    # it sees the host's address.
    proc = _ssh(hosts, name, "true && ip -o -4 addr show dev eth0")
    assert proc.returncode == 0, proc.stderr
    assert f" {hosts.address(name)}/" in proc.stdout
    # ... and so does exec
    proc = hosts.exec(name, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"])
    assert f" {hosts.address(name)}/" in proc.stdout, proc.stderr


def test_host_reaches_the_other_host(hosts):
    # ssh from inside hostA's namespace to hostB (the config file is on the shared filesystem)
    proc = hosts.exec("hostA", ["ssh", "-F", hosts.ssh_config, "hostB",
                                "ip -o -4 addr show dev eth0"], timeout=30)
    assert proc.returncode == 0, (proc.stderr, "bridged traffic blocked by an iptables FORWARD "
                                               "policy (br_netfilter)?")
    assert f" {hosts.address('hostB')}/" in proc.stdout


def test_host_reaches_the_launcher(hosts):
    with socket.socket() as server:
        server.bind((hosts.launcher_address, 0))
        server.listen(1)
        server.settimeout(20)
        port = server.getsockname()[1]
        client = (f"import socket; s = socket.create_connection(({hosts.launcher_address!r}, "
                  f"{port}), timeout=10); s.sendall(b'hello from hostA'); s.close()")
        remote = subprocess.Popen(hosts.ssh_argv("hostA", shlex.join([sys.executable, "-c",
                                                                      client])),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            conn, peer = server.accept()
            with conn:
                conn.settimeout(10)
                assert conn.recv(100) == b"hello from hostA"
            assert peer[0] == hosts.address("hostA")
        finally:
            out, err = remote.communicate(timeout=30)
        assert remote.returncode == 0, err


def test_set_down_then_up(hosts):
    hosts.set_down("hostB")
    try:
        t0 = time.monotonic()
        proc = subprocess.run(["ssh", "-F", hosts.ssh_config, "-o", "ConnectTimeout=1", "hostB",
                               "true"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 255
        assert "timed out" in proc.stderr, proc.stderr      # no answer at all, not a refusal
        assert time.monotonic() - t0 >= 0.9
    finally:
        hosts.set_up("hostB")
    proc = _ssh(hosts, "hostB", "true")
    assert proc.returncode == 0, proc.stderr


def test_teardown_removes_everything_even_on_error(tmp_path):
    require_test_hosts()
    with pytest.raises(ZeroDivisionError):
        with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as h:
            # A program left running on a host, detached from its ssh session.
            proc = _ssh(h, "hostA", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
            assert proc.returncode == 0, proc.stderr
            sleeper = int(proc.stdout.split()[-1])
            _wait_for(lambda: sleeper in h.pids_in("hostA", include_sshd_sessions=False), 10,
                      "the sleeper in hostA's namespace")
            assert h.sshd_pid("hostA") not in h.pids_in("hostA")
            sshd_pids = [h.sshd_pid(n) for n in h.names]
            namespaces = [h.netns(n) for n in h.names]
            links = h.created_links()
            assert set(links) <= set(list_links())
            1 / 0
    assert h.teardown_seconds is not None and h.teardown_seconds < 10
    assert not set(namespaces) & set(list_netns())
    assert not [link for link in list_links() if link.startswith(f"{PREFIX}{h.tag}-")]
    assert not set(links) & set(list_links())
    assert not [p for p in sshd_pids + [sleeper] if _alive(p)]


def test_cleanup_leftovers_of_a_crashed_run():
    require_test_hosts()
    # A "crashed run": names carrying a pid that no longer exists, no lock file.
    dead = next(p for p in range(4_000_000, 1, -1) if not os.path.exists(f"/proc/{p}"))
    tag = f"{_b36(dead)}_0"
    ns, bridge = f"{PREFIX}{tag}-hostA", f"{PREFIX}{tag}-b"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, timeout=30)
    orphan = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "300"])
    try:
        _wait_for(lambda: orphan.pid in [int(p) for p in subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True,
            timeout=30).stdout.split()],
            10, "the orphan in the leftover namespace")
        removed = cleanup_leftovers()
        assert ns in removed and bridge in removed
        orphan.wait(timeout=10)
        assert ns not in list_netns() and bridge not in list_links()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)
