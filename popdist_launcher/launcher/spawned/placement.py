"""Where one instance runs on its host: its CPUs (``--bind-to``), its thread budget and its GPUs.

The launcher only says what was asked (``wire/placement_text.py``, in the instance's environment
as ``POPRUN_PLACEMENT``); each instance's wrapper works it out on its own host (:func:`place`, a
pure function of the options, the program's environment, the CPUs the wrapper may use and a root
folder holding ``sys/devices/system/...``, ``proc/driver/nvidia`` and ``dev``), binds itself and
extends the program's environment before starting it. Standard library only, and the launcher's
``console`` for its lines' prefix: the wrapper loads this once per instance.
"""
import os

from popdist_launcher.launcher.output import console
from popdist_launcher.wire.placement_text import decode

THREAD_VARS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
GPU_ENV = "CUDA_VISIBLE_DEVICES"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
# TensorFlow's inter-op pool runs independent ops side by side; a data-parallel training step
# has few of them (see benchmarks/cpu_placement.py), so two threads suffice and the instance's
# threads stay near its budget instead of doubling it.
MAX_INTEROP = 2


def parse_cpulist(text: str) -> "list[int]":
    """Linux's CPU list format ("0-3,8,10-11"; "" is no CPU) as sorted CPU numbers."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """The inverse of :func:`parse_cpulist`: runs written as ranges."""
    runs: "list[list[int]]" = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _read(path: str) -> "str | None":
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def numa_nodes(allowed, root: str = "/") -> "list[tuple[int, list[int]]]":
    """(node number, its CPUs among ``allowed``) for each NUMA node that has some, in node order,
    from ``ROOT/sys/devices/system/node/node*/cpulist``; no such folder: node 0 holds them all."""
    folder = os.path.join(root, "sys/devices/system/node")
    allowed = set(allowed)
    nodes = []
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        text = _read(os.path.join(folder, name, "cpulist"))
        cpus = [c for c in parse_cpulist(text or "") if c in allowed]
        if cpus:
            nodes.append((int(name[4:]), cpus))
    nodes.sort()
    return nodes or [(0, sorted(allowed))]


def physical_cores(allowed, root: str = "/") -> "list[list[int]]":
    """``allowed`` grouped into physical cores (hyperthread siblings together, from
    ``ROOT/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``), ordered by first CPU."""
    allowed = set(allowed)
    cores: "dict[tuple, list[int]]" = {}
    for cpu in sorted(allowed):
        text = _read(os.path.join(root, f"sys/devices/system/cpu/cpu{cpu}/topology/"
                                        f"thread_siblings_list"))
        siblings = tuple(c for c in parse_cpulist(text or "") if c in allowed) or (cpu,)
        cores.setdefault(siblings, []).append(cpu)
    return sorted(cores.values())


def core_block(cores: "list[list[int]]", local_index: int,
               local_size: int) -> "tuple[list[int], int]":
    """``--bind-to core``: contiguous blocks of whole cores, one per local instance (sizes differ
    by at most one core), and how many instances share the block: more instances than cores
    share them round-robin."""
    if local_size > len(cores):
        block = cores[local_index % len(cores)]
        sharers = len(range(local_index % len(cores), local_size, len(cores)))
        return list(block), sharers
    first = local_index * len(cores) // local_size
    last = (local_index + 1) * len(cores) // local_size
    return [cpu for core in cores[first:last] for cpu in core], 1


def numa_block(nodes: "list[tuple[int, list[int]]]", local_index: int,
               local_size: int) -> "tuple[int, list[int], int]":
    """``--bind-to numa``: local instance j on node j mod nodes; its node, CPUs and sharers."""
    at = local_index % len(nodes)
    node, cpus = nodes[at]
    return node, cpus, len(range(at, local_size, len(nodes)))


def host_gpus(env, root: str = "/") -> "list[str]":
    """The GPUs instances on this host may use: the ids (numbers or UUIDs) in the program's
    CUDA_VISIBLE_DEVICES when set, else "0".."N-1" for the N NVIDIA devices under
    ``ROOT/proc/driver/nvidia/gpus`` (or ``ROOT/dev/nvidia<N>``)."""
    if GPU_ENV in env:
        ids = [g.strip() for g in env[GPU_ENV].split(",") if g.strip()]
        # CUDA stops at the first id that is not a device: "-1" or "" hide every GPU.
        return [] if not ids or ids[0].startswith("-") else ids
    try:
        count = len(os.listdir(os.path.join(root, "proc/driver/nvidia/gpus")))
    except OSError:
        try:
            count = sum(1 for n in os.listdir(os.path.join(root, "dev"))
                        if n.startswith("nvidia") and n[6:].isdigit())
        except OSError:
            count = 0
    return [str(i) for i in range(count)]


def gpu_block(gpus: "list[str]", local_index: int, local_size: int,
              per_instance: int) -> "tuple[list[str], bool]":
    """Local instance j gets GPUs [j*K, (j+1)*K); with too few, the list is dealt round-robin
    (instances share GPUs; TF_FORCE_GPU_ALLOW_GROWTH lets them). The second value: shared."""
    if local_size * per_instance <= len(gpus):
        return gpus[local_index * per_instance:(local_index + 1) * per_instance], False
    count = min(per_instance, len(gpus))
    return [gpus[(local_index * count + k) % len(gpus)] for k in range(count)], True


def thread_budget(cpus: int, sharers: int) -> int:
    """Threads for one instance: its CPUs divided among the instances sharing them, at least 1."""
    return max(1, cpus // max(1, sharers))


class Placement:
    """What :func:`place` decided for one instance."""

    __slots__ = ("cpus", "env", "report", "notes")

    def __init__(self, cpus, env: dict, report: str, notes: list) -> None:
        self.cpus = cpus      # CPUs to bind to, or None (not bound)
        self.env = env        # variables to add to the program's environment
        self.report = report  # the --report-bindings line ("" unless asked for)
        self.notes = notes    # lines the user must see (sharing)


def place(text: str, env, allowed, root: str = "/", host: str = "") -> Placement:
    """Decide an instance's placement on ``host``: ``text`` is its POPRUN_PLACEMENT,
    ``env`` the program's environment (a variable it already has is left alone), ``allowed``
    the CPUs the wrapper may use. Pure: reads only under ``root``."""
    options = decode(text)
    index = options.get("index", "?")
    bind = options.get("bind", "none")
    local, _, size = options.get("local", "0/1").partition("/")
    local_index, local_size = int(local), int(size)
    allowed = sorted(allowed)
    cpus, sharers, nodes_of = None, local_size, None
    notes, shared_cores = [], ""
    nodes = numa_nodes(allowed, root) if bind == "numa" or options.get("report") == "1" else []
    if bind == "core":
        cores = physical_cores(allowed, root)
        cpus, sharers = core_block(cores, local_index, local_size)
        if local_size > len(cores):
            shared_cores = f"{local_size} instances share {len(cores)} cores round-robin"
    elif bind == "numa":
        node, cpus, sharers = numa_block(nodes, local_index, local_size)
        nodes_of = [node]
    budget = thread_budget(len(cpus if cpus is not None else allowed), sharers)
    added: dict = {}
    values = {}
    if options.get("threads") == "1":
        values = {"OMP_NUM_THREADS": budget, "TF_NUM_INTRAOP_THREADS": budget,
                  "TF_NUM_INTEROP_THREADS": min(MAX_INTEROP, budget)}
        for name, value in values.items():
            if name not in env:
                added[name] = str(value)
    gpus_text, per = options.get("gpus", "none"), 0
    if gpus_text == "auto":
        per = max(1, int(options.get("replicas", "1")))
    elif gpus_text.isdigit():
        per = int(gpus_text)
    gpus: "list[str]" = []
    if per:
        available = host_gpus(env, root)
        if available:
            gpus, shared = gpu_block(available, local_index, local_size, per)
            added[GPU_ENV] = ",".join(gpus)
            if GROWTH_ENV not in env:
                added[GROWTH_ENV] = "true"
            if shared and local_index == 0:
                notes.append(console.line(f"note: host {host} has {len(available)} GPU(s) for "
                                          f"{local_size} instance(s) x {per}; instances share "
                                          f"them round-robin (memory growth on)."))
    if shared_cores and local_index == 0 and options.get("report") != "1":
        notes.append(console.line(f"note: --bind-to core on host {host}: {shared_cores}."))
    report = ""
    if options.get("report") == "1":
        shown = cpus if cpus is not None else allowed
        if nodes_of is None:
            nodes_of = [n for n, node_cpus in nodes if set(node_cpus) & set(shown)]
        how = f"bind-to {bind}" if cpus is not None else "not bound"
        threads = ", ".join(f"{label} {_shown(name, added, env)}" for label, name in
                            (("intra-op", "TF_NUM_INTRAOP_THREADS"),
                             ("inter-op", "TF_NUM_INTEROP_THREADS"), ("OMP", "OMP_NUM_THREADS")))
        report = console.line(f"instance {index} on host {host}: CPUs {format_cpulist(shown)} "
                              f"({how}{'; ' + shared_cores if shared_cores else ''}), NUMA "
                              f"node{'s' if len(nodes_of) > 1 else ''} "
                              f"{','.join(str(n) for n in nodes_of)}, threads: {threads}")
        if gpus:
            report += f", GPUs {','.join(gpus)} ({GPU_ENV})"
    return Placement(cpus, added, report, notes)


def _shown(name: str, added: dict, env) -> str:
    if name in added:
        return added[name]
    if name in env:
        return f"{env[name]} (set by the user)"
    return "default"
