"""Which connections of a worker the wrapper shuts down when a peer of the job failed
(peer_sockets.py): the /proc tables read right, the rules (peers only; not the rendezvous
server; not what the process accepted on its own listener), and the shutdown itself on a real
grandchild process through pidfd_getfd."""
import os
import socket
import subprocess
import sys
import time

import pytest

from popdist_launcher.launcher.spawned import peer_sockets as ps

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1
   1: 0100007F:A001 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 102 1
   2: 0300000A:1F90 0700000A:C350 01 00000000:00000000 00:00000000 00000000     0        0 103 1
   3: 0100007F:A002 0100007F:2328 06 00000000:00000000 00:00000000 00000000     0        0 0 1
"""
TCP6 = "\n".join([  # the same columns, 32 hex digits per address
    "  sl  local_address remote_address st tx:rx tr:when retrnsmt uid timeout inode",
    "   0: 0000000000000000FFFF00000300000A:B000 0000000000000000FFFF00000400000A:2710 01 "
    "0:0 0:0 0 0 0 201 1",
    "   1: 00000000000000000000000001000000:B001 00000000000000000000000001000000:2711 01 "
    "0:0 0:0 0 0 0 202 1"])


@pytest.mark.skipif(sys.byteorder != "little", reason="the sample tables are a little-endian "
                                                      "kernel's")
def test_proc_tables_are_read_as_addresses_ports_and_states():
    assert ps.parse_table(TCP, v6=False) == {
        101: ("127.0.0.1", 8080, "0.0.0.0", 0, "0A"),
        102: ("127.0.0.1", 40961, "127.0.0.1", 8080, "01"),
        103: ("10.0.0.3", 8080, "10.0.0.7", 50000, "01")}  # inode 0 (TIME_WAIT) is no socket
    assert ps.parse_table(TCP6, v6=True) == {
        201: ("10.0.0.3", 45056, "10.0.0.4", 10000, "01"),  # IPv4-mapped: dotted
        202: ("::1", 45057, "::1", 10001, "01")}


def test_only_established_connections_to_peers_are_chosen():
    rendezvous = ("10.0.0.1", 9000)
    peers = {"10.0.0.2", "10.0.0.3"}
    sockets = {
        1: ("10.0.0.2", 41000, "10.0.0.3", 42000, "01"),   # a Gloo pair: chosen
        2: ("10.0.0.2", 41001, "10.0.0.1", 9000, "01"),    # the rendezvous server
        3: ("0.0.0.0", 43000, "0.0.0.0", 0, "0A"),         # a listener of its own ...
        4: ("10.0.0.2", 43000, "10.0.0.3", 50000, "01"),   # ... and what it accepted there
        5: ("10.0.0.2", 41002, "192.0.2.9", 443, "01"),    # not the job's
        6: ("10.0.0.2", 41003, "10.0.0.3", 42001, "08"),   # closing already
        7: ("10.0.0.2", 41004, "10.0.0.1", 9001, "01"),    # the launcher's host, other port
    }
    peers_and_launcher = peers | {"10.0.0.1"}
    assert ps.choose(sockets, rendezvous, peers) == [1]
    assert ps.choose(sockets, rendezvous, peers_and_launcher) == [1, 7]


def test_the_notice_names_the_rendezvous_server_and_the_peers_once():
    payload = ps.notice(("10.0.0.1", 9000), ["10.0.0.3", "10.0.0.2", "10.0.0.3"])
    assert payload == b"10.0.0.1 9000 10.0.0.2 10.0.0.3"
    assert ps.read_notice(payload) == (("10.0.0.1", 9000), {"10.0.0.2", "10.0.0.3"})
    assert ps.read_notice(b"::ffff:10.0.0.1 1 ::1") == (("10.0.0.1", 1), {"::1"})


HOLDER = """
import socket, sys, time
peer, rdv, other = (int(x) for x in sys.argv[1:4])
own = socket.create_server(("127.0.0.1", 0))
held = [socket.create_connection(("127.0.0.1", peer)),
        socket.create_connection(("127.0.0.1", rdv)),
        socket.create_connection(("127.0.0.2", other))]
print(own.getsockname()[1], flush=True)
held.append(own.accept()[0])
time.sleep(60)
"""


def test_a_grandchilds_connections_to_peers_are_shut_down_and_the_rest_kept():
    """The holder (started by a shell, so a grandchild) connects to a peer, to the rendezvous
    server and to an address outside the job, and accepts one connection on its own listener;
    only the peer's end sees the shutdown."""
    servers = {"peer": socket.create_server(("127.0.0.1", 0)),
               "rdv": socket.create_server(("127.0.0.1", 0)),
               "other": socket.create_server(("127.0.0.2", 0))}
    ports = [str(s.getsockname()[1]) for s in servers.values()]
    child = subprocess.Popen(["/bin/sh", "-c", '"$0" -c "$1" "$2" "$3" "$4"; exit $?',
                              sys.executable, HOLDER, *ports], stdout=subprocess.PIPE, text=True)
    try:
        ends = {name: s.accept()[0] for name, s in servers.items()}
        ends["accepted"] = socket.create_connection(("127.0.0.1",
                                                     int(child.stdout.readline())))
        time.sleep(0.2)  # the holder's accept() returned
        payload = ps.notice(("127.0.0.1", int(ports[1])), ["127.0.0.1"])
        assert ps.cut(child.pid, payload) == 1
        for name, end in ends.items():
            end.settimeout(0.5)
            if name == "peer":
                assert end.recv(1) == b""  # end of file: the holder shut its end down
            else:
                with pytest.raises(socket.timeout):
                    end.recv(1)
        assert ps.cut(child.pid, payload) == 0  # nothing left to shut down
    finally:
        child.kill()
        child.wait()
        for s in servers.values():
            s.close()


def test_descendants_include_the_process_itself_and_its_grandchildren():
    child = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(ps.descendants(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        found = ps.descendants(child.pid)
        assert found[0] == child.pid and len(found) == 2
    finally:
        for pid in ps.descendants(child.pid)[::-1]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        child.wait()


def test_a_descriptor_number_reused_meanwhile_is_left_alone_and_every_copy_closed():
    """The program may close a socket between the look at its descriptors and the copy: the copy
    is then another file (here a pipe) or another socket, never shut down, always closed."""
    r, w = os.pipe()
    try:
        assert ps._shut_down(os.dup(r), inode=1) is False
        left, right = socket.socketpair()
        copy = os.dup(left.fileno())
        assert ps._shut_down(copy, inode=os.fstat(right.fileno()).st_ino) is False
        with pytest.raises(OSError):
            os.fstat(copy)  # closed
        assert ps._shut_down(os.dup(left.fileno()), os.fstat(left.fileno()).st_ino) is True
        assert right.recv(1) == b""
        left.close()
        right.close()
    finally:
        os.close(r)
        os.close(w)
