"""Two (or more) real "hosts" for multi-host tests: Linux network namespaces running OpenSSH.

Each host is a network namespace with its own address on a private /24, joined to the root
namespace by a veth pair plugged into a bridge that also carries the launcher's address. In each
namespace an ``sshd`` listens on the host's address and lets the test's key log in as root. The
namespaces share the filesystem (and the process table) with the test, so the same interpreter
and virtualenv paths work on every "host".

    with TestHosts(names=("hostA", "hostB"), workdir=tmp_path) as hosts:
        subprocess.run(["ssh", "-F", hosts.ssh_config, "hostA", "true"], check=True)

API (see each docstring): ``TestHosts(names, workdir, *, ssh_port=22, connect_timeout=5,
start_timeout=15.0, sshd_options=None, fast_kex=True, clean_leftovers=True)`` with
``.ssh_config .identity .known_hosts .subnet .launcher_address .names .dir .tag .bridge``,
``.address(n) .netns(n) .exec(n, argv) .ssh_argv(n, *cmd) .pids_in(n) .sshd_pid(n)
.sshd_log(n) .set_down(n) .set_up(n) .created_links() .close()``; module functions
``require_test_hosts() missing_prerequisites() cleanup_leftovers() in_ci() list_netns()
list_links()``.

The namespaces have no default route: from a host only the test subnet (the other hosts and
``launcher_address``) and its own loopback are reachable. Remote commands run as root through
root's login shell (bash sources ~/.bashrc for ssh commands), so pass absolute paths
(``sys.executable``) rather than relying on the remote PATH.

Everything created carries the prefix ``pdl<pid base 36>_<counter>`` (``pdl`` = popdist launcher),
so concurrent runs never collide, and :func:`cleanup_leftovers` can remove what a crashed run
left behind (it runs automatically when a :class:`TestHosts` starts). Needs root, ``ip``
(iproute2), ``sshd`` (openssh-server) and ``ssh``/``ssh-keygen`` (openssh-client):
``scripts/install-test-hosts.sh`` installs them.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

__all__ = ["TestHosts", "cleanup_leftovers", "missing_prerequisites", "require_test_hosts",
           "list_netns", "list_links",
           "in_ci", "find_sshd", "PREFIX"]

PREFIX = "pdl"
# pdl<pid36>_<counter36>-b (bridge), -h<i> (root end of host i's veth), -n<i> (its peer, renamed
# to eth0 once inside the namespace); namespaces: pdl<pid36>_<counter36>-<host name>.
_NAME_RE = re.compile(rf"^{PREFIX}([0-9a-z]+)_([0-9a-z]+)-")
_CMD_TIMEOUT = 30          # seconds for any single ip/ssh-keygen command
_counter = itertools.count()
_live: "set[TestHosts]" = set()
_live_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------
# small helpers


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def in_ci() -> bool:
    """True when the CI environment variable says we run in CI
    (then missing tools are a failure)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


def find_sshd() -> Optional[str]:
    """Absolute path of the sshd binary (it lives in sbin, often not on a non-root PATH)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])
    found = shutil.which("sshd", path=path)
    return os.path.abspath(found) if found else None


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = _CMD_TIMEOUT,
         **kwargs) -> subprocess.CompletedProcess:
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def describe(pids) -> List[str]:
    """``pid state: command line`` of each process, for an assertion's message."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        lines.append(f"{pid} {state}: {command[:300]}")
    return lines


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_dead(pids: Iterable[int], timeout: float) -> List[int]:
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def list_netns() -> List[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _netns_pids(ns: str) -> List[int]:
    proc = _run(["ip", "netns", "pids", ns], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def list_links() -> List[str]:
    """Names of the interfaces in the root namespace."""
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def _kill_netns_processes(ns: str, exclude: Iterable[int] = (), grace: float = 1.0,
                          timeout: float = 5.0) -> List[int]:
    """SIGTERM then SIGKILL every process living in ``ns``; return any that would not die."""
    skip = set(exclude)
    pids = [p for p in _netns_pids(ns) if p not in skip and p != os.getpid()]
    if not pids:
        return []
    for p in pids:
        _kill(p, signal.SIGTERM)
    left = _wait_dead(pids, grace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Processes can fork while we kill: look again until the namespace is empty.
        left = [p for p in set(left) | set(_netns_pids(ns)) if p not in skip and _alive(p)]
        if not left:
            return []
        for p in left:
            _kill(p, signal.SIGKILL)
        left = _wait_dead(left, 0.5)
    return [p for p in left if _alive(p)]


def _lock_dir() -> Path:
    """Where each live run keeps a locked file (root-only, tmpfs: cleared on reboot like netns)."""
    run = Path("/run")
    base = run if os.access(run, os.W_OK) else Path(tempfile.gettempdir())
    d = base / "popdist-netns-hosts"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _tag_is_live(tag: str) -> bool:
    """Whether the run that owns ``tag`` still runs (it holds a lock on <lock dir>/<tag>.lock)."""
    lock = _lock_dir() / f"{tag}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        # No lock file (another /run?): fall back on whether the owner pid still exists.
        return _alive(int(tag.split("_", 1)[0], 36))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            raise
        try:
            lock.unlink()
        except FileNotFoundError:
            pass
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# prerequisites


@lru_cache(maxsize=None)
def missing_prerequisites() -> List[str]:
    """What stops this machine from running the test hosts (empty list: nothing)."""
    problems = []
    if not sys.platform.startswith("linux"):
        return ["needs Linux network namespaces"]
    if os.geteuid() != 0:
        problems.append("needs root (network namespaces, sshd as root)")
    for tool, package in (("ip", "iproute2"), ("ssh", "openssh-client"),
                          ("ssh-keygen", "openssh-client")):
        if not shutil.which(tool):
            problems.append(f"'{tool}' not found (package {package})")
    if not find_sshd():
        problems.append("'sshd' not found (package openssh-server)")
    if not problems:
        probe = f"{PREFIX}{_b36(os.getpid())}_probe-x"
        proc = _run(["ip", "netns", "add", probe], check=False)
        if proc.returncode != 0:
            problems.append(f"cannot create a network namespace: {proc.stderr.strip()}")
        else:
            _run(["ip", "netns", "del", probe], check=False)
    return problems


def require_test_hosts() -> None:
    """In a pytest test or fixture: fail, with what to install, unless the hosts can run.
    A skip would hide a feature that is not tested."""
    import pytest

    problems = missing_prerequisites()
    if problems:
        msg = ("multi-host test hosts unavailable: " + "; ".join(problems)
               + " -- run scripts/install-test-hosts.sh as root")
        pytest.fail(msg, pytrace=False)


# ---------------------------------------------------------------------------------------------
# leftovers


_NETNS_ETC = Path("/etc/netns")


def _write_netns_hosts(ns: str, address: str, names: Sequence[str]) -> None:
    """``ip netns exec`` bind-mounts /etc/netns/NS/hosts over /etc/hosts: inside a test host its
    names (the machine's hostname too, as on a real cluster node) resolve to its own address.
    Horovod's Gloo process-set contexts bind the address the hostname resolves to."""
    folder = _NETNS_ETC / ns
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts").write_text(
        "127.0.0.1 localhost\n" + f"{address} {' '.join(dict.fromkeys(names))}\n")


def _remove_netns_etc(ns: str) -> None:
    folder = _NETNS_ETC / ns
    for child in folder.glob("*"):
        child.unlink()
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass


def cleanup_leftovers(*, include_live: bool = False) -> List[str]:
    """Remove namespaces, interfaces and processes that crashed runs of this harness left behind.

    A run counts as crashed when nothing holds its lock file any more (or, without a lock file,
    when its pid is gone). ``include_live=True`` removes every ``pdl*`` object, live or not.
    Returns the names removed.
    """
    tags: Dict[str, Dict[str, List[str]]] = {}
    for ns in list_netns():
        m = _NAME_RE.match(ns)
        if m:
            tags.setdefault(f"{m[1]}_{m[2]}", {"ns": [], "links": []})["ns"].append(ns)
    for link in list_links():
        m = _NAME_RE.match(link)
        if m:
            tags.setdefault(f"{m[1]}_{m[2]}", {"ns": [], "links": []})["links"].append(link)
    removed = []
    for tag, objs in tags.items():
        if not include_live and _tag_is_live(tag):
            continue
        for ns in objs["ns"]:
            _kill_netns_processes(ns, grace=0.2)
        # veth root ends before the namespaces (synchronous), the bridge last.
        for link in sorted(objs["links"], key=lambda n: n.endswith("-b")):
            if _run(["ip", "link", "del", link], check=False).returncode == 0:
                removed.append(link)
        for ns in objs["ns"]:
            if _run(["ip", "netns", "del", ns], check=False).returncode == 0:
                removed.append(ns)
            _remove_netns_etc(ns)
        try:
            (_lock_dir() / f"{tag}.lock").unlink()
        except FileNotFoundError:
            pass
    return removed


# ---------------------------------------------------------------------------------------------
# subnet choice


def _used_networks() -> List[ipaddress.IPv4Network]:
    nets = []
    for argv in (["ip", "-4", "route", "show", "table", "all"], ["ip", "-4", "-o", "addr", "show"]):
        for line in _run(argv, check=False).stdout.splitlines():
            toks = line.split()
            cands = toks[:2] if argv[2] == "route" else toks[3:4]   # addr: "N: dev inet A/L ..."
            for tok in cands:
                if tok == "default":
                    break
                try:
                    nets.append(ipaddress.ip_network(tok, strict=False))
                    break
                except ValueError:
                    continue
    return [n for n in nets if n.version == 4]


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    start = os.getpid() % 256
    candidates = [ipaddress.ip_network(f"10.97.{(start + i) % 256}.0/24") for i in range(256)]
    candidates += [ipaddress.ip_network(f"10.{b}.{c}.0/24")
                   for b in range(98, 256) for c in (start, (start + 128) % 256)]
    for net in candidates:
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the test hosts")


# ---------------------------------------------------------------------------------------------
# the hosts


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: sshd dies if the test process is killed
    except Exception:
        pass


class TestHosts:
    """Context manager: ``names`` hosts, each a network namespace running sshd.

    Attributes/methods: ``ssh_config``, ``identity``, ``known_hosts``, ``subnet``,
    ``launcher_address``, ``names``, ``dir``, ``address(name)``, ``netns(name)``,
    ``exec(name, argv)``, ``ssh_argv(name, *command)``, ``pids_in(name)``, ``sshd_pid(name)``,
    ``sshd_log(name)``, ``set_down(name)``, ``set_up(name)``, ``created_links()``, ``close()``.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, names: Sequence[str] = ("hostA", "hostB"),
                 workdir: Optional[os.PathLike] = None, *, ssh_port: int = 22,
                 connect_timeout: int = 5, start_timeout: float = 15.0,
                 sshd_options: Optional[Dict[str, str]] = None,
                 fast_kex: bool = True, clean_leftovers: bool = True) -> None:
        names = list(names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"need distinct host names, got {names!r}")
        if len(names) > 200:
            raise ValueError("at most 200 hosts")
        for n in names:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", n):
                raise ValueError(f"host name {n!r}: use letters, digits, '.', '_', '-'")
        self.names: List[str] = names
        self.ssh_port = ssh_port
        self.connect_timeout = connect_timeout
        self.start_timeout = start_timeout
        self._sshd_options = {"MaxStartups": "100", "MaxSessions": "100"}
        self._sshd_options.update(sshd_options or {})
        self._clean_leftovers = clean_leftovers
        self._fast_kex = fast_kex
        self.tag = f"{_b36(os.getpid())}_{_b36(next(_counter))}"
        self.bridge = f"{PREFIX}{self.tag}-b"
        self._given_workdir = Path(workdir) if workdir is not None else None
        self.dir: Optional[Path] = None
        self.subnet: Optional[str] = None
        self.launcher_address: Optional[str] = None
        self.ssh_config: Optional[str] = None
        self.identity: Optional[str] = None
        self.known_hosts: Optional[str] = None
        self._addr: Dict[str, str] = {}
        self._ns: Dict[str, str] = {n: f"{PREFIX}{self.tag}-{n}" for n in names}
        self._veth: Dict[str, str] = {n: f"{PREFIX}{self.tag}-h{_b36(i)}"
                                      for i, n in enumerate(names)}
        self._peer: Dict[str, str] = {n: f"{PREFIX}{self.tag}-n{_b36(i)}"
                                      for i, n in enumerate(names)}
        self._mac: Dict[str, str] = {}
        self._down: set = set()
        self._sshd: Dict[str, subprocess.Popen] = {}
        self._logs: Dict[str, Path] = {}
        self._made_ns: List[str] = []
        self._made_links: List[str] = []
        self._lock_fd: Optional[int] = None
        self._own_dir = False
        self._closed = False
        self.setup_seconds: Optional[float] = None
        self.teardown_seconds: Optional[float] = None

    # -- public API -------------------------------------------------------------------------

    def address(self, name: str) -> str:
        return self._addr[self._check(name)]

    def netns(self, name: str) -> str:
        return self._ns[self._check(name)]

    def sshd_pid(self, name: str) -> int:
        return self._sshd[self._check(name)].pid

    def sshd_log(self, name: str) -> Path:
        """sshd's own log (-e: everything it logs goes there); read it when a login fails."""
        return self._logs[self._check(name)]

    def ssh_argv(self, name: str, *command: str) -> List[str]:
        """``ssh -F <config> NAME COMMAND...``"""
        return ["ssh", "-F", str(self.ssh_config), name, *command]

    def exec(self, name: str, argv: Sequence[str], *, timeout: float = 60,
             **kwargs) -> subprocess.CompletedProcess:
        """Run ``ip netns exec NS argv`` to completion (text output captured, no check)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(["ip", "netns", "exec", self.netns(name), *argv],
                              timeout=timeout, **kwargs)

    def pids_in(self, name: str, *, include_sshd_sessions: bool = True) -> List[int]:
        """Live processes in the host's namespace, minus the listening sshd this harness started.

        ``include_sshd_sessions=False`` also leaves out sshd's per-connection processes
        (``sshd: root@notty``), keeping only what those sessions started.
        """
        sshd = self._sshd.get(self._check(name))
        skip = {sshd.pid} if sshd else set()
        pids = [p for p in _netns_pids(self.netns(name)) if p not in skip and _alive(p)]
        if not include_sshd_sessions:
            pids = [p for p in pids if not self._is_sshd(p)]
        return pids

    def set_down(self, name: str) -> None:
        """Make ``name`` stop answering: its link goes down and packets to it vanish silently.

        Connections to it then hang until the client's timeout (ssh: ConnectTimeout), as for a
        host behind a dropping firewall, rather than failing fast with 'No route to host': the
        host's MAC stays pinned in every neighbour table so ARP never gives up. Processes
        inside keep running. :meth:`set_up` undoes it.
        """
        self._check(name)
        addr, mac = self._addr[name], self._mac[name]
        _run(["ip", "link", "set", self._veth[name], "down"])
        _run(["ip", "neigh", "replace", addr, "lladdr", mac, "dev", self.bridge,
              "nud", "permanent"], check=False)
        for other in self.names:
            if other != name:
                _run(["ip", "netns", "exec", self._ns[other], "ip", "neigh", "replace", addr,
                      "lladdr", mac, "dev", "eth0", "nud", "permanent"], check=False)
        self._down.add(name)

    def set_up(self, name: str) -> None:
        """Undo :meth:`set_down`."""
        self._check(name)
        addr = self._addr[name]
        _run(["ip", "link", "set", self._veth[name], "up"])
        _run(["ip", "neigh", "del", addr, "dev", self.bridge], check=False)
        for other in self.names:
            if other != name:
                _run(["ip", "netns", "exec", self._ns[other], "ip", "neigh", "del", addr,
                      "dev", "eth0"], check=False)
        self._down.discard(name)

    def created_links(self) -> List[str]:
        """Root-namespace interfaces this instance created (bridge and veth root ends)."""
        return list(self._made_links)

    # -- context manager --------------------------------------------------------------------

    def __enter__(self) -> "TestHosts":
        t0 = time.monotonic()
        try:
            self._setup()
        except BaseException:
            self.close(raise_errors=False)
            raise
        self.setup_seconds = time.monotonic() - t0
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(raise_errors=exc_type is None)

    def close(self, raise_errors: bool = True) -> List[str]:
        """Remove everything this instance created; safe to call twice. Returns the problems."""
        if self._closed:
            return []
        t0 = time.monotonic()
        # A second Ctrl-C must not cut the teardown short: hold SIGINT until it is done.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            problems = self._teardown()
        finally:
            self._closed = True
            with _live_lock:
                _live.discard(self)
            self.teardown_seconds = time.monotonic() - t0
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        if problems and raise_errors:
            raise RuntimeError("test hosts teardown left something behind: " + "; ".join(problems))
        return problems

    # -- internals --------------------------------------------------------------------------

    def _check(self, name: str) -> str:
        if name not in self._ns:
            raise KeyError(f"unknown host {name!r} (hosts: {', '.join(self.names)})")
        return name

    @staticmethod
    def _is_sshd(pid: int) -> bool:
        try:
            return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "sshd"
        except OSError:
            return False

    def _setup(self) -> None:
        problems = missing_prerequisites()
        if problems:
            raise RuntimeError("test hosts unavailable: " + "; ".join(problems)
                               + " (run scripts/install-test-hosts.sh as root)")
        with _live_lock:
            _live.add(self)
        # Our lock: held for our lifetime, it tells cleanup_leftovers (here or in a concurrent
        # run) that these names are in use.
        lock_path = _lock_dir() / f"{self.tag}.lock"
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if self._clean_leftovers:
            cleanup_leftovers()

        self._make_dir()
        self._make_keys()
        self._make_network()
        self._write_ssh_config()
        for name in self.names:
            self._start_sshd(name)
        deadline = time.monotonic() + self.start_timeout
        for name in self.names:
            self._wait_sshd(name, deadline)

    def _make_dir(self) -> None:
        if self._given_workdir is None:
            self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.tag}-"))
            self._own_dir = True
        else:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            d = self._given_workdir / "netns-hosts"
            if d.exists():
                d = self._given_workdir / f"netns-hosts-{self.tag}"
            d.mkdir()
            self.dir = d.resolve()
        os.chmod(self.dir, 0o700)

    def _keygen(self, path: Path, comment: str) -> str:
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
        os.chmod(path, 0o600)
        return Path(f"{path}.pub").read_text().strip()

    def _make_keys(self) -> None:
        assert self.dir is not None
        key = self.dir / "id_ed25519"
        pub = self._keygen(key, f"popdist-test-{self.tag}")
        self.identity = str(key)
        auth = self.dir / "authorized_keys"
        auth.write_text(pub + "\n")
        os.chmod(auth, 0o600)
        for name in self.names:
            hdir = self.dir / name
            hdir.mkdir(mode=0o700)
            self._keygen(hdir / "ssh_host_ed25519_key", f"{name}-{self.tag}")

    def _make_network(self) -> None:
        # Choose and claim the subnet under a lock so two runs starting together differ.
        lock_fd = os.open(_lock_dir() / "subnet.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("timed out waiting for the subnet lock")
                    time.sleep(0.05)
            net = _pick_subnet()
            hosts = list(net.hosts())
            self.subnet = str(net)
            self.launcher_address = str(hosts[0])
            for i, name in enumerate(self.names):
                self._addr[name] = str(hosts[i + 1])
            self._made_links.append(self.bridge)
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{self.launcher_address}/{net.prefixlen}",
                  "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
        finally:
            os.close(lock_fd)

        for name in self.names:
            ns, veth, peer = self._ns[name], self._veth[name], self._peer[name]
            self._made_ns.append(ns)
            _run(["ip", "netns", "add", ns])
            self._made_links.append(veth)
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", peer, "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge])
            _run(["ip", "link", "set", veth, "up"])
            in_ns = ["ip", "netns", "exec", ns, "ip"]
            # One batch per namespace: 'ip -batch' saves an exec per command.
            batch = "\n".join([
                "link set lo up",
                f"link set {peer} name eth0",
                f"addr add {self._addr[name]}/{net.prefixlen} dev eth0",
                "link set eth0 up",
            ]) + "\n"
            _run(in_ns + ["-batch", "-"], input=batch)
            out = _run(in_ns + ["-o", "link", "show", "eth0"]).stdout
            m = re.search(r"link/ether ([0-9a-f:]{17})", out)
            if not m:
                raise RuntimeError(f"no MAC address for eth0 in {ns}: {out!r}")
            self._mac[name] = m[1]

    def _write_ssh_config(self) -> None:
        assert self.dir is not None
        known = self.dir / "known_hosts"
        lines = []
        for name in self.names:
            pub = (self.dir / name / "ssh_host_ed25519_key.pub").read_text().split()
            hostpat = (self._addr[name] if self.ssh_port == 22
                       else f"[{self._addr[name]}]:{self.ssh_port}")
            namepat = name if self.ssh_port == 22 else f"[{name}]:{self.ssh_port}"
            lines.append(f"{namepat},{hostpat} {pub[0]} {pub[1]}")
        known.write_text("\n".join(lines) + "\n")
        os.chmod(known, 0o600)
        self.known_hosts = str(known)

        def q(p) -> str:
            return f'"{p}"'

        cfg = [f"# popdist_launcher test hosts {self.tag} (subnet {self.subnet})"]
        for name in self.names:
            cfg += [f"Host {name}", f"    HostName {self._addr[name]}", ""]
        cfg += [
            "Host *",
            "    User root",
            f"    Port {self.ssh_port}",
            f"    IdentityFile {q(self.identity)}",
            "    IdentitiesOnly yes",
            "    StrictHostKeyChecking no",
            f"    UserKnownHostsFile {q(known)}",
            "    GlobalKnownHostsFile /dev/null",
            "    BatchMode yes",
            "    LogLevel ERROR",
            f"    ConnectTimeout {self.connect_timeout}",
            "    PasswordAuthentication no",
            "    KbdInteractiveAuthentication no",
        ]
        if self._fast_kex:
            # OpenSSH 9's default post-quantum key exchange (sntrup761) costs ~0.3 s of CPU per
            # connection on a small machine; these are throwaway keys on a private bridge.
            cfg.append("    KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org")
        cfg.append("")
        path = self.dir / "ssh_config"
        path.write_text("\n".join(cfg))
        os.chmod(path, 0o600)
        self.ssh_config = str(path)

    def _sshd_config(self, name: str) -> Path:
        assert self.dir is not None
        hdir = self.dir / name

        def q(p) -> str:
            return f'"{p}"'

        opts = {
            "ListenAddress": self._addr[name],
            "Port": str(self.ssh_port),
            "HostKey": q(hdir / "ssh_host_ed25519_key"),
            "PidFile": q(hdir / "sshd.pid"),
            "AuthorizedKeysFile": q(self.dir / "authorized_keys"),
            "PermitRootLogin": "prohibit-password",
            "PubkeyAuthentication": "yes",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            # The workdir sits under /tmp (world-writable): with StrictModes sshd would refuse
            # the authorized_keys file because of it.
            "StrictModes": "no",
            # Without PAM sshd would refuse a root whose password field is locked ('!').
            "UsePAM": "yes" if _root_password_locked() else "no",
            "UseDNS": "no",
            "PrintMotd": "no",
            "PrintLastLog": "no",
            "LogLevel": "VERBOSE",
        }
        opts.update(self._sshd_options)
        path = hdir / "sshd_config"
        path.write_text("".join(f"{k} {v}\n" for k, v in opts.items()))
        os.chmod(path, 0o600)
        return path

    def _start_sshd(self, name: str) -> None:
        sshd = find_sshd()
        assert sshd is not None and self.dir is not None
        # sshd's privilege-separation directory must exist (the service unit normally makes it).
        privsep = Path("/run/sshd")
        if not privsep.is_dir():
            privsep.mkdir(mode=0o755, parents=True, exist_ok=True)
        config = self._sshd_config(name)
        _write_netns_hosts(self._ns[name], self.address(name), [socket.gethostname(), name])
        log = self.dir / name / "sshd.log"
        self._logs[name] = log
        with open(log, "ab") as logf:
            # 'ip netns exec' execs sshd in place: the Popen pid is sshd's pid.
            self._sshd[name] = subprocess.Popen(
                # Its own UTS namespace too: each test host has its own hostname (MPI and
                # Horovod tell hosts apart by it). unshare and sh exec in place: same pid.
                ["ip", "netns", "exec", self._ns[name], "unshare", "--uts", "--", "sh", "-c",
                 'hostname "$0" && exec "$@"', name, sshd, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_set_pdeathsig)

    def _wait_sshd(self, name: str, deadline: float) -> None:
        proc, addr = self._sshd[name], self._addr[name]
        last = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd for {name} exited with {proc.returncode}: "
                                   f"{self._logs[name].read_text(errors='replace').strip()}")
            try:
                with socket.create_connection((addr, self.ssh_port), timeout=1.0) as s:
                    s.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError as e:
                last = e
            if time.monotonic() >= deadline:
                raise RuntimeError(f"sshd for {name} at {addr}:{self.ssh_port} did not answer "
                                   f"within {self.start_timeout}s ({last}); log: "
                                   f"{self._logs[name].read_text(errors='replace').strip()}")
            time.sleep(0.02)

    def _teardown(self) -> List[str]:
        problems: List[str] = []

        def attempt(what: str, fn, *args) -> None:
            try:
                fn(*args)
            except Exception as e:  # keep going: remove as much as we can
                problems.append(f"{what}: {e}")

        # 1. the sshd listeners we started (by pid), then reap them
        for name, proc in self._sshd.items():
            if proc.poll() is None:
                attempt(f"stop sshd {name}", proc.terminate)
        for name, proc in self._sshd.items():
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    problems.append(f"sshd {name} (pid {proc.pid}) would not die")
        # 2. anything still living in our namespaces (remote programs, sshd sessions)
        for ns in self._made_ns:
            try:
                left = _kill_netns_processes(ns)
                if left:
                    problems.append(f"processes {left} in {ns} would not die")
            except Exception as e:
                problems.append(f"kill processes in {ns}: {e}")
        # 3. veth root ends (takes the peer with it), namespaces, bridge
        present = set(list_links()) if self._made_links else set()
        for link in reversed(self._made_links):
            if link != self.bridge and link in present:
                proc = _run(["ip", "link", "del", link], check=False)
                if proc.returncode:
                    problems.append(f"ip link del {link}: {proc.stderr.strip()}")
        existing = set(list_netns()) if self._made_ns else set()
        for ns in self._made_ns:
            if ns in existing:
                proc = _run(["ip", "netns", "del", ns], check=False)
                if proc.returncode:
                    problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
            _remove_netns_etc(ns)
        # peers that never reached their namespace (setup interrupted half-way)
        for name in self.names:
            if self._peer[name] in present and self._veth[name] not in present:
                _run(["ip", "link", "del", self._peer[name]], check=False)
        if self.bridge in present:
            proc = _run(["ip", "link", "del", self.bridge], check=False)
            if proc.returncode:
                problems.append(f"ip link del {self.bridge}: {proc.stderr.strip()}")
        # 4. our lock, our directory
        if self._lock_fd is not None:
            try:
                (_lock_dir() / f"{self.tag}.lock").unlink()
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._own_dir and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        return problems


@lru_cache(maxsize=None)
def _root_password_locked() -> bool:
    try:
        with open("/etc/shadow") as f:
            for line in f:
                if line.startswith("root:"):
                    return line.split(":")[1].startswith("!")
    except OSError:
        pass
    return False


@atexit.register
def _close_all_at_exit() -> None:
    with _live_lock:
        live = list(_live)
    for hosts in live:
        hosts.close(raise_errors=False)
