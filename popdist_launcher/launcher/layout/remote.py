"""Reaching other hosts with the system's ssh client: argv building with safe quoting, host name
resolution through ssh's own configuration, and the one probe per host that finds its address,
network interface and free ports before a multi-host job starts.
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from popdist_launcher.launcher.output.console import debug


class RemoteError(RuntimeError):
    """A host could not be reached or probed; the message names it and says what to check,
    ``hosts`` the hosts that failed."""

    def __init__(self, message: str, hosts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.hosts = tuple(hosts)


# Where Open MPI (and PRRTE, its runtime since 5.0) read the remote-shell agent and its options
# from the environment: a Kubernetes MPIJob sets OMPI_MCA_plm_rsh_agent (kubexec.sh, kubectl exec)
# or OMPI_MCA_plm_rsh_args. The first one set wins.
AGENT_VARIABLES = ("PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_ssh_agent", "PRTE_MCA_plm_rsh_agent",
                   "OMPI_MCA_plm_rsh_agent")
AGENT_ARGS_VARIABLES = ("PRTE_MCA_plm_ssh_args", "OMPI_MCA_plm_ssh_args", "PRTE_MCA_plm_rsh_args",
                        "OMPI_MCA_plm_rsh_args")


def agent_from_environ(environ: Mapping[str, str]) -> Tuple[str, ...]:
    """The remote-shell agent the environment gives MPI (argv words), or () for none.

    Open MPI allows a ``:``-separated list of candidates ("ssh : rsh"); the first whose program
    exists is used, as mpirun does."""
    value = next((environ[n] for n in AGENT_VARIABLES if environ.get(n, "").strip()), "")
    if not value:
        return ()
    candidates = [shlex.split(c) for c in value.split(":") if c.strip()]
    chosen = next((c for c in candidates if _runnable(c[0], environ)), candidates[0])
    extra = next((environ[n] for n in AGENT_ARGS_VARIABLES if environ.get(n, "").strip()), "")
    return tuple(chosen + shlex.split(extra))


def _runnable(program: str, environ: Mapping[str, str]) -> bool:
    if os.sep in program:
        return os.access(program, os.X_OK)
    return any(os.access(os.path.join(d or ".", program), os.X_OK)
               for d in environ.get("PATH", os.defpath).split(os.pathsep))


class SshOptions(NamedTuple):
    port: Optional[int] = None
    identity: Optional[str] = None
    config: Optional[str] = None
    connect_timeout: float = 30.0
    # MPI's remote-shell agent from the environment (agent_from_environ): when set, the mpi
    # backend leaves mpirun to it and the host probes go through it too (AGENT HOST COMMAND).
    agent: Tuple[str, ...] = ()

    def base_argv(self) -> List[str]:
        """``ssh`` with our options: never prompt, fail fast, notice a dead peer; or the agent."""
        if self.agent:
            return list(self.agent)
        argv = ["ssh", "-o", "BatchMode=yes", "-o",
                f"ConnectTimeout={max(1, int(self.connect_timeout))}",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-T"]
        if self.config:
            argv += ["-F", self.config]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.identity:
            argv += ["-i", self.identity]
        return argv

    def argv(self, host: str, remote_command: str) -> List[str]:
        if self.agent:  # an agent such as kubexec.sh takes HOST COMMAND, no "--"
            return [*self.agent, host, remote_command]
        return [*self.base_argv(), "--", host, remote_command]


class Probe(NamedTuple):
    address: str
    iface: str
    ports: Tuple[int, ...]
    hostname: str = ""
    hostname_address: str = ""


def resolve(host: str, options: SshOptions) -> str:
    """The IPv4 address ssh would connect to for ``host`` (honours aliases in ssh_config)."""
    name = host
    if (options.config or not _is_address(host)) and not options.agent:
        argv = ["ssh", "-G"] + (["-F", options.config] if options.config else []) + ["--", host]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RemoteError(f"cannot run 'ssh -G {host}' ({exc}); install an OpenSSH "
                              f"client.") from None
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname" and value:
                name = value.strip()
                break
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RemoteError(f"host {host!r} does not resolve ({exc.strerror}); check the name, "
                          f"/etc/hosts or your ssh_config.") from None
    return infos[0][4][0]


def _is_address(text: str) -> bool:
    try:
        socket.inet_aton(text)
        return text.count(".") == 3
    except OSError:
        return False


def probe_hosts(hosts: Sequence[str], ports_per_host: Sequence[int], options: SshOptions,
                subnet: Optional[str] = None, iface: Optional[str] = None,
                port_range: Optional[Tuple[int, int]] = None) -> Dict[str, Probe]:
    """Probe every host in parallel over ssh; an error names each host that failed and why."""
    procs = {}
    for host, count in zip(hosts, ports_per_host):
        argv = probe_command(host, count, options, subnet, iface, port_range)
        debug("probing %s: %s", host, " ".join(argv))
        procs[host] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, process_group=0)
    deadline = time.monotonic() + options.connect_timeout + 10
    results: Dict[str, Probe] = {}
    problems: Dict[str, str] = {}  # host -> what went wrong there
    for host, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            problems[host] = f"{host} did not answer within --start-timeout " \
                             f"{options.connect_timeout:g} s"
            continue
        reply = _last_json(out)
        if proc.returncode == 0 and reply and "address" in reply:
            results[host] = Probe(reply["address"], reply.get("iface", ""), tuple(reply["ports"]),
                                  reply.get("hostname", ""), reply.get("hostname_address", ""))
        elif reply and "error" in reply:
            problems[host] = f"{host}: {reply['error']}"
        else:
            why = (err.strip().splitlines() or [f"ssh exited with {proc.returncode}"])[-1]
            if "timed out" in why:
                why += f" (--start-timeout {options.connect_timeout:g} s)"
            problems[host] = f"{host} could not be reached or probed over ssh: {why}"
    if problems:
        shell = f"'{' '.join(options.agent)} HOST true'" if options.agent else "'ssh HOST true'"
        raise RemoteError("; ".join(problems.values()) + f". Check that {shell} works without a "
                          "password and that poprun-lite is installed at the same path on every "
                          "host.", list(problems))
    return results


def probe_command(host: str, ports: int, options: SshOptions, subnet: Optional[str] = None,
                  iface: Optional[str] = None,
                  port_range: Optional[Tuple[int, int]] = None) -> List[str]:
    """The ssh command that runs the host probe (host_probe.py) on ``host``, asking for
    ``ports`` free ports; raises RemoteError when the host's name does not resolve."""
    words = [sys.executable, "-m", "popdist_launcher.launcher.layout.host_probe",
             "--ports", str(ports), "--peer", resolve(host, options)]
    if subnet:
        words += ["--subnet", subnet]
    if iface:
        words += ["--iface", iface]
    if port_range:
        words += ["--port-range", f"{port_range[0]}-{port_range[1]}"]
    return options.argv(host, " ".join(shlex.quote(w) for w in words))


class BackgroundProbe:
    """One host's probe running while the launcher's loop goes on (elastic jobs probe hosts as
    they come): ``fileno()`` is readable until ``read()`` says its output ended."""

    def __init__(self, name: str, argv: List[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, process_group=0)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.out = b""

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def read(self) -> bool:
        """Take what arrived; True at the end of its output."""
        try:
            data = os.read(self.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return False
        self.out += data
        return not data

    def result(self) -> Tuple[Optional[Probe], str]:
        """(the host's probe, or None and why it failed); reaps the probe."""
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            err = b""
        reply = _last_json(self.out.decode("utf-8", "replace"))
        if reply and "address" in reply:
            return Probe(reply["address"], reply.get("iface", ""), tuple(reply.get("ports", ())),
                         reply.get("hostname", ""), reply.get("hostname_address", "")), ""
        if reply:
            return None, str(reply.get("error", "no address in its answer"))
        lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
        return None, lines[-1] if lines else f"ssh exited with {self.proc.returncode}"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.communicate()


def _last_json(text: str) -> Optional[dict]:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None
