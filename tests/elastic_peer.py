"""Elastic jobs on the network-namespace test hosts (tests/netns_hosts.py) under ``horovodrun``, the
peer, and under ``poprun-lite``, side by side; and what their consoles say about training steps.

How horovodrun 0.28.1 elastic is made to run on the test hosts (each thing below was tried):

* Its ``--network-interface`` must name one interface that the driver *and* every host have, with
  an IPv4 address the hosts can reach: the driver's address on it becomes the rendezvous address,
  and the name becomes every worker's ``HOROVOD_GLOO_IFACE``. The test hosts have ``eth0``; the
  root namespace has the test bridge (``pdl...-b``) and an ``eth0`` of its own on another network.
  With the driver in the root namespace, each way fails (workers start over ssh, die, exit 1):
  ``--network-interface eth0`` and no ``--network-interface`` (it then waits for 2 hosts and
  probes them over ssh, finding ``eth0``) hand out the root's ``eth0`` address, so every worker
  aborts with "HTTP GET request failed too many times"; ``--network-interface <bridge>`` makes
  Gloo fail on the hosts with "Unable to find address for: pdl...-b". So the driver runs in a
  test host of its own (``driver_host``, e.g. ``hostC`` of ``TestHosts(("hostA", "hostB",
  "hostC"))``) through ``ip netns exec``: there ``eth0`` is on the test subnet, and
  ``--network-interface eth0`` works for the driver and every worker.
* horovodrun has no ssh config option: it runs ``ssh -o PasswordAuthentication=no -o
  StrictHostKeyChecking=no HOST [-p P] [-i KEY] COMMAND`` from PATH (through a shell). An ``ssh``
  placed first on PATH that adds ``-F <the hosts' ssh_config>`` stands in for a user's
  ~/.ssh/config: host aliases (the discovery script prints ``hostA:2``), the test key and the
  test known_hosts file (``--ssh-identity-file`` with the hosts' addresses would add their keys to
  root's ~/.ssh/known_hosts through StrictHostKeyChecking=no; not done).
* On one machine, ``--host-discovery-script`` printing ``localhost:N`` with ``--network-interface
  lo`` runs without ssh.

What it does on a fault (measured with ``elastic_loop.py``, 2 slots per host, Gloo timeout 20 s):
hostB's workers killed: their ssh sessions end (exit 255), hostB is blacklisted, one survivor
fails at once ("Connection closed by peer"), the other only when HOROVOD_GLOO_TIMEOUT_SECONDS
ends ("Timed out waiting 20000ms for recv"), so the next step came 20.2-20.5 s after the kill in
6 of 7 runs (2.5 s in one), as under poprun-lite with ``POPRUN_CUT_PEERS=0`` (the same Horovod
workers; poprun-lite's own wrappers shut the survivors' connections down: under a second).
hostB cut off (``set_down``): its
ssh sessions stay open (no ServerAliveInterval), no exit is recorded and the registration round
never completes: no step at a smaller size until hostB answers again (then within seconds). So
bound every run (:meth:`Launch.wait`; :meth:`Launch.stop` kills its process group) and end
whatever a run left on the hosts (:func:`end_leftovers`).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from netns_hosts import TestHosts

BIN = os.path.dirname(sys.executable)
STEP_RE = re.compile(r"\bstep (\d+) size (\d+) t=(\d+(?:\.\d+)?)")
COMMITTED_RE = re.compile(r"\bcommitted (\d+)")


class Step(NamedTuple):
    """One ``step <n> size <s> t=<time>`` line of rank 0 (n = steps done)."""
    n: int
    size: int
    t: float


def steps(text: str) -> List[Step]:
    """The step lines of a console, in order."""
    return [Step(int(m[1]), int(m[2]), float(m[3])) for m in STEP_RE.finditer(text)]


def commits(text: str) -> List[int]:
    """The step counts of the ``committed <n>`` lines of a console, in order."""
    return [int(m[1]) for m in COMMITTED_RE.finditer(text)]


def write_hosts_file(path: Path, hosts: Sequence[Tuple[str, int]]) -> None:
    """Write ``host:slots`` lines to ``path`` at once
    (a rename: a discovery run never reads half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{name}:{slots}\n" for name, slots in hosts))
    os.replace(tmp, path)


def write_discovery_script(folder: Path, hosts_file: Path) -> Path:
    """A host discovery script that prints ``hosts_file`` (edit that file to add or drop hosts)."""
    script = folder / "discover.sh"
    script.write_text(f'#!/bin/sh\nexec cat "{hosts_file}"\n')
    script.chmod(0o755)
    return script


def write_ssh_wrapper(hosts: TestHosts, folder: Path) -> Path:
    """``folder/ssh``: ssh with the hosts' ssh config; put ``folder`` first on horovodrun's PATH."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise RuntimeError("'ssh' not found (package openssh-client)")
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec "{ssh}" -F "{hosts.ssh_config}" "$@"\n')
    wrapper.chmod(0o755)
    return folder


def horovodrun_argv(hosts: TestHosts, driver_host: str, discovery_script: Path,
                    program: Sequence[str], *, np: int, min_np: int, max_np: int,
                    cooldown_range: Optional[Tuple[int, int]] = (1, 2),
                    elastic_timeout: Optional[float] = None) -> List[str]:
    """horovodrun elastic run by ``ip netns exec`` in ``driver_host`` (see the module docstring)."""
    argv = ["ip", "netns", "exec", hosts.netns(driver_host), os.path.join(BIN, "horovodrun"),
            "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
            "--host-discovery-script", str(discovery_script), "--network-interface", "eth0"]
    if cooldown_range:
        argv += ["--blacklist-cooldown-range", str(cooldown_range[0]), str(cooldown_range[1])]
    if elastic_timeout is not None:
        argv += ["--elastic-timeout", f"{elastic_timeout:g}"]
    return argv + list(program)


def horovodrun_env(ssh_wrapper_dir: Path, variables: Mapping[str, str],
                   base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """horovodrun's environment: ``base`` (default: this process's) with the ssh wrapper and this
    interpreter's bin/ first on PATH, plus ``variables`` (horovodrun exports them all to the
    workers, as it does every variable of its environment)."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(ssh_wrapper_dir), BIN, env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(variables)
    return env


def poprun_lite_argv(hosts: TestHosts, discovery_script: Path, program: Sequence[str], *,
                     np: int, min_np: int, max_np: int, variables: Mapping[str, str],
                     cooldown_range: Optional[Tuple[int, int]] = (1, 2),
                     elastic_timeout: Optional[float] = None) -> List[str]:
    """poprun-lite's elastic mode on the same hosts, from the root namespace (its ssh config
    option and the hosts' subnet); ``variables`` go to every instance with ``-x``."""
    argv = [sys.executable, "-m", "popdist_launcher", "-np", str(np), "--min-np", str(min_np),
            "--max-np", str(max_np), "--host-discovery-script", str(discovery_script),
            "--elastic-mode", "horovod", "--ssh-config", str(hosts.ssh_config),
            "--host-subnet", str(hosts.subnet)]
    if cooldown_range:
        argv += ["--blacklist-cooldown-range", str(cooldown_range[0]), str(cooldown_range[1])]
    if elastic_timeout is not None:
        argv += ["--elastic-timeout", f"{elastic_timeout:g}"]
    for name, value in variables.items():
        argv += ["-x", f"{name}={value}"]
    return argv + list(program)


class Launch:
    """A launcher started in a session of its own, stdout and stderr both to ``log``."""

    def __init__(self, argv: Sequence[str], log: Path, env: Mapping[str, str],
                 cwd: Optional[Path] = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def steps(self) -> List[Step]:
        return steps(self.text())

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, condition: Callable[[], bool], timeout: float,
                 poll: float = 0.05) -> bool:
        """Poll ``condition`` until it holds (True) or ``timeout`` passes or the launcher exits
        (False; the condition is checked once more after an exit)."""
        deadline = time.monotonic() + timeout
        while True:
            if condition():
                return True
            if not self.running():
                return condition()
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    def wait(self, timeout: float) -> Optional[int]:
        """The exit status, or None if the launcher still runs after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 5.0) -> int:
        """SIGTERM to the launcher's process group, ``grace`` seconds, then SIGKILL to it."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if not self.running():
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            self.wait(wait)
        return self.proc.wait(timeout=10)


def end_leftovers(hosts: TestHosts, names: Sequence[str]) -> Dict[str, List[int]]:
    """SIGKILL what a job left running on the hosts ``names`` (sshd itself excepted: every other
    process in a test host's namespace was started by the job); returns the pids per host."""
    left = {name: hosts.pids_in(name, include_sshd_sessions=False) for name in names}
    for pids in left.values():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return {name: pids for name, pids in left.items() if pids}
