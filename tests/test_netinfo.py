"""The host probe's address choice (wire/netinfo.py): every IPv4 address of every
interface, read through psutil, including an interface's second address."""
import json
import os
import subprocess
import sys

import pytest

from netns_hosts import TestHosts, require_test_hosts
from popdist_launcher.wire import netinfo


def _ip_addresses():
    """(interface, address) pairs as iproute2 lists them: the reference psutil must match."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    pairs = set()
    for line in out.splitlines():
        words = line.split()
        pairs.add((words[1], words[3].split("/")[0]))
    return pairs


def test_interface_addresses_match_iproute2():
    assert set(netinfo.interface_addresses()) == _ip_addresses()


def test_one_host_job_stays_on_loopback():
    assert netinfo.choose() == ("127.0.0.1", "lo")


def test_choice_by_interface_subnet_and_peer():
    assert netinfo.choose(iface="lo") == ("127.0.0.1", "lo")
    assert netinfo.choose(subnet="127.0.0.0/8") == ("127.0.0.1", "lo")
    assert netinfo.choose(peer="127.0.0.1") == ("127.0.0.1", "lo")


def test_unknown_interface_and_subnet_name_what_the_host_has():
    with pytest.raises(netinfo.NetInfoError) as err:
        netinfo.choose(iface="no-such-if0")
    assert "no IPv4 interface 'no-such-if0'" in str(err.value)
    assert "lo (127.0.0.1)" in str(err.value)
    with pytest.raises(netinfo.NetInfoError) as err:
        netinfo.choose(subnet="198.51.100.0/24")
    assert "no address in 198.51.100.0/24" in str(err.value)
    assert "lo (127.0.0.1)" in str(err.value)


def test_second_address_of_an_interface_is_found(tmp_path):
    """A host whose job subnet is an interface's second address: --host-subnet finds it."""
    require_test_hosts()
    extra = f"10.254.{os.getpid() % 250}.7"
    with TestHosts(names=("hostA",), workdir=tmp_path) as hosts:
        added = hosts.exec("hostA", ["ip", "addr", "add", f"{extra}/32", "dev", "eth0"])
        assert added.returncode == 0, added.stderr
        probe = hosts.exec("hostA", [sys.executable, "-m",
                                     "popdist_launcher.launcher.layout.host_probe",
                                     "--subnet", f"{extra}/32"], timeout=60)
        assert probe.returncode == 0, probe.stdout + probe.stderr
        answer = json.loads(probe.stdout)
        assert (answer["address"], answer["iface"]) == (extra, "eth0")
        first = hosts.exec("hostA", [sys.executable, "-m",
                                     "popdist_launcher.launcher.layout.host_probe",
                                     "--subnet", str(hosts.subnet)], timeout=60)
        assert json.loads(first.stdout)["address"] == hosts.address("hostA")
