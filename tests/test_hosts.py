"""Host lists, ranges, hostfiles and slot allocation (pure functions), and their CLI errors."""
import pytest

from conftest import poprun
from popdist_launcher.launcher.layout import hosts as h


def test_host_list_with_slots_ranges_and_defaults():
    assert h.parse_host_list("a:2,b:2") == [h.HostSlots("a", 2), h.HostSlots("b", 2)]
    assert h.parse_host_list("node[0-2]:4") == [h.HostSlots(f"node{i}", 4) for i in range(3)]
    assert [x.name for x in h.parse_host_list("n[08-10,3]")] == ["n08", "n09", "n10", "n3"]
    assert h.parse_host_list("a,b") == [h.HostSlots("a", 1, False), h.HostSlots("b", 1, False)]
    assert h.parse_host_list("a,b:2") == [h.HostSlots("a", 1, False), h.HostSlots("b", 2)]
    assert h.parse_host_list("a:1,a:2") == [h.HostSlots("a", 3)]  # named twice: slots add up
    assert [x.name for x in h.parse_host_list("r[1-2]c[1-2]")] == ["r1c1", "r1c2", "r2c1", "r2c2"]


@pytest.mark.parametrize("spec, words", [
    ("a:0", "at least 1"), ("a:x", "slots must be"), ("n[3-1]", "runs backwards"),
    ("n[a-b]", "not a list of numbers"), ("n[1-2", "unbalanced"), ("a b", "not a host name"),
    (",", "names no host"),
])
def test_host_list_errors_say_what_to_write(spec, words):
    with pytest.raises(h.HostError, match=words):
        h.parse_host_list(spec)


def test_hostfile_format():
    text = "# cluster\nnodeA slots=2\n\nnodeB slots=4 max_slots=8  # big one\nnode[1-2]\n"
    assert h.parse_hostfile(text) == [h.HostSlots("nodeA", 2), h.HostSlots("nodeB", 4),
                                      h.HostSlots("node1", 1, False),
                                      h.HostSlots("node2", 1, False)]
    with pytest.raises(h.HostError, match="line 2: 'cpus=4' is not understood"):
        h.parse_hostfile("a slots=1\nb cpus=4\n", "hostfile")
    with pytest.raises(h.HostError, match="lists no host"):
        h.parse_hostfile("# nothing\n")


def test_allocation_spreads_evenly_within_slots():
    two_two = [h.HostSlots("a", 2), h.HostSlots("b", 2)]
    assert h.allocate(4, two_two) == [2, 2]
    assert h.allocate(2, two_two) == [1, 1]
    assert h.allocate(3, two_two) == [2, 1]
    assert h.allocate(5, [h.HostSlots("a", 1), h.HostSlots("b", 4)]) == [1, 4]
    assert h.allocate(1, [h.HostSlots("a", 1)] * 3) == [1, 0, 0]
    with pytest.raises(h.HostError, match="5 instances need 5 slots but -H gives 4"):
        h.allocate(5, two_two)
    assert h.allocate(6, two_two, oversubscribe=True) == [3, 3]


def test_hosts_without_slots_divide_the_instances_evenly_as_poprun():
    assert h.allocate(4, h.parse_host_list("nodeA,nodeB")) == [2, 2]
    assert h.allocate(5, h.parse_host_list("n[1-3]")) == [2, 2, 1]
    assert h.allocate(1, h.parse_host_list("a,b")) == [1, 0]
    assert h.allocate(4, h.parse_hostfile("nodeA\nnodeB\n")) == [2, 2]
    # one host given slots: mpirun's rules for all (a host without slots has one)
    with pytest.raises(h.HostError, match="4 instances need 4 slots but -H gives 3"):
        h.allocate(4, h.parse_host_list("a,b:2"))


def test_default_instance_count_is_one_per_slot():
    assert h.default_instances(h.parse_host_list("a:2,b:2")) == 4
    assert h.default_instances(h.parse_host_list("a,b,c")) == 3
    assert h.default_instances(h.parse_hostfile("a slots=3\nb\n")) == 4


def test_slurm_allocation_from_its_variables():
    assert h.parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    slots, _ = h.slurm_hosts({"SLURM_JOB_NODELIST": "node[1-3],gpu7",
                              "SLURM_TASKS_PER_NODE": "2(x3),1"})
    assert slots == [h.HostSlots("node1", 2), h.HostSlots("node2", 2), h.HostSlots("node3", 2),
                     h.HostSlots("gpu7", 1)]
    with pytest.raises(h.HostError, match="inside salloc"):
        h.slurm_hosts({})


@pytest.mark.parametrize("args, words", [
    (["-np", "3", "-H", "localhost:2"], "3 instances need 3 slots but -H gives 2"),
    (["-np", "2", "-H", "a", "--hostfile", "f"], "give one of them"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts"], "cannot be read"),
    (["-np", "2", "-H", "x:1,y:1", "--backend", "local"], "--backend local cannot start"),
    (["-np", "2", "--host-subnet", "10.1.2"], "is not a subnet"),
    (["-np", "2", "--backend", "slurm"], "needs a Slurm allocation"),
])
def test_cli_host_errors_are_one_sentence(args, words):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SLURM_")}
    result = poprun(*args, "python", "-c", "pass", env=env)
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_oversubscribe_on_localhost_runs(tmp_path):
    result = poprun("-np", "3", "-H", "localhost:1", "--oversubscribe", "python", "-c", "pass")
    assert result.returncode == 0, result.stderr


def _allocate_one_by_one(num_instances, hosts, oversubscribe=False):
    """The allocation rule spelled out: each instance to the emptiest host (the first such),
    among hosts with a free slot while any has one."""
    counts = [0] * len(hosts)
    for _ in range(num_instances):
        free = [i for i, x in enumerate(hosts) if counts[i] < x.slots]
        pool = free or range(len(hosts))
        counts[min(pool, key=lambda i: (counts[i], i))] += 1
    return counts


def test_allocation_matches_the_rule_and_scales():
    import random
    rng = random.Random(12)
    for _ in range(300):
        hosts = [h.HostSlots(f"n{i}", rng.randint(1, 5)) for i in range(rng.randint(1, 6))]
        total = sum(x.slots for x in hosts)
        n = rng.randint(1, 2 * total)
        assert h.allocate(n, hosts, oversubscribe=True) == _allocate_one_by_one(n, hosts)
    many = [h.HostSlots(f"n{i}", 8) for i in range(8192)]
    assert h.allocate(65536, many) == [8] * 8192


def test_hostfile_must_be_text(tmp_path):
    good = tmp_path / "good"
    good.write_text("a slots=2\n")
    assert h.parse_hostfile(h.read_hostfile(str(good))) == [h.HostSlots("a", 2)]
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x81\x00a slots=2\n")
    with pytest.raises(h.HostError, match="is not a text file"):
        h.read_hostfile(str(binary))
    with pytest.raises(h.HostError, match="cannot be read"):
        h.read_hostfile(str(tmp_path / "missing"))


@pytest.mark.parametrize("spec, words", [
    ("a,,b", "empty entry between commas"), ("a,", "empty entry between commas"),
    ("n[0-70000]", "more than 65536 hosts"), ("r[1-300]c[1-300]", "more than 65536 hosts"),
    (",".join(f"g{i}[1-60000]" for i in range(3)), "more than 65536 hosts"),
])
def test_host_lists_that_are_typos_or_too_large(spec, words):
    with pytest.raises(h.HostError, match=words):
        h.parse_host_list(spec)


def test_backend_auto_is_picked_in_one_place():
    """``--backend auto``'s rule (pure, beside what this host offers): an asked-for backend as
    asked; an allocation's hosts srun; other hosts ssh (mpirun through MPI's agent in a fixed
    world); this host alone mpirun for 2+ instances when Horovod can use it, else local; an
    elastic job never mpirun."""
    from popdist_launcher.launcher.layout.backends import detect, registry

    def pick(requested="auto", **given):
        facts = dict(in_allocation=False, all_local=True, num_instances=2, mpi_agent=False)
        return registry.pick_backend(requested, **{**facts, **given})

    assert pick("ssh", in_allocation=True) == "ssh"
    assert pick("local", all_local=False) == "local"  # lay_out then says it cannot
    assert pick(in_allocation=True) == pick(in_allocation=True, fixed_world=False) == "slurm"
    assert pick(all_local=False) == pick(all_local=False, mpi_agent=True, fixed_world=False) \
        == "ssh"
    assert pick(all_local=False, mpi_agent=True) == ("mpi" if detect.find_mpirun() else "ssh")
    assert pick(num_instances=1) == pick(fixed_world=False) == "local"
    assert pick() == ("mpi" if detect.mpi_transport_available() else "local")
