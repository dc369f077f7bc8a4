"""Other launchers' options that poprun-lite does not take (torchrun's, mpirun's, horovodrun's,
PopRun's), each with one sentence naming ours; and which of our options stand after the program
name, where they go to the program."""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

HOSTS = "name the hosts and their instances in one command: -H host1:N,host2:N (or --hostfile)"
RENDEZVOUS = ("poprun-lite is its own rendezvous: it starts every host's instances from one "
              "command (-H host1:N,host2:N) and picks free ports itself (--port-range to "
              "choose them)")
PLACEMENT = ("poprun-lite places instances in host order itself, a contiguous block per host "
             "(see --print-topology); --bind-to binds them to CPUs, and --mpi-global-args passes "
             "other mpirun options on")
HOROVOD_KNOB = "set Horovod's variable for every instance with -x, e.g. -x HOROVOD_{}=VALUE"

# option (as written, before any "=value") -> (tool, what to write instead)
PEERS = {
    # torchrun
    "--nproc-per-node": ("torchrun", "-np N starts N instances (on one host; -H host:N for "
                                     "each host)"),
    "--nnodes": ("torchrun", HOSTS),
    "--node-rank": ("torchrun", "there is no command per host: " + HOSTS),
    "--rdzv-backend": ("torchrun", RENDEZVOUS),
    "--rdzv-endpoint": ("torchrun", RENDEZVOUS),
    "--rdzv-id": ("torchrun", RENDEZVOUS),
    "--rdzv-conf": ("torchrun", RENDEZVOUS),
    "--master-addr": ("torchrun", RENDEZVOUS),
    "--master-port": ("torchrun", RENDEZVOUS),
    "--standalone": ("torchrun", "one host is the default: poprun-lite -np N PROGRAM"),
    "--log-dir": ("torchrun", "--output-dir DIR keeps each instance's stdout and stderr"),
    "--redirects": ("torchrun", "--output-dir DIR keeps each instance's stdout and stderr"),
    "--tee": ("torchrun", "the console shows every instance's output (tagged) and "
                          "--output-dir DIR keeps it too"),
    "--no-python": ("torchrun", "a PROGRAM that does not end in .py runs as it is"),
    # mpirun (Open MPI)
    "-n": ("mpirun", "-np N (or --num-instances N)"),
    "--np": ("mpirun", "-np N (or --num-instances N)"),
    "-c": ("mpirun", "-np N (or --num-instances N)"),
    "-N": ("mpirun", "-H host1:N,host2:N gives each host N instances"),
    "-npernode": ("mpirun", "-H host1:N,host2:N gives each host N instances"),
    "--npernode": ("mpirun", "-H host1:N,host2:N gives each host N instances"),
    "-ppn": ("mpiexec", "-H host1:N,host2:N gives each host N instances"),
    "-hosts": ("mpiexec", "-H host1:N,host2:N"),
    "-hostfile": ("mpirun", "--hostfile FILE"),
    "--machinefile": ("mpirun", "--hostfile FILE"),
    "-machinefile": ("mpirun", "--hostfile FILE"),
    "--map-by": ("mpirun", PLACEMENT),
    "--rank-by": ("mpirun", PLACEMENT),
    "--display-map": ("mpirun", "--print-topology shows where each instance runs"),
    "--mca": ("mpirun", "--mpi-global-args '--mca NAME VALUE' passes it to mpirun"),
    "--allow-run-as-root": ("mpirun", "not needed: poprun-lite gives it to mpirun when run as "
                                      "root"),
    "--wdir": ("mpirun", "instances start in the current folder: cd there first"),
    "-wdir": ("mpirun", "instances start in the current folder: cd there first"),
    # horovodrun
    "--num-proc": ("horovodrun", "-np N"),
    "--gloo": ("horovodrun", "--backend local (one host) or --backend ssh start instances "
                             "without MPI, and Horovod then uses Gloo"),
    "--mpi": ("horovodrun", "--backend mpi (the default where mpirun is found)"),
    "--config-file": ("horovodrun", "--config FILE"),
    "--log-level": ("horovodrun", "-v shows what the launcher does (twice for more)"),
    "--disable-cache": ("horovodrun", "nothing is cached between jobs"),
    "--gloo-timeout-seconds": ("horovodrun", HOROVOD_KNOB.format("GLOO_TIMEOUT_SECONDS")),
    "--fusion-threshold-mb": ("horovodrun", HOROVOD_KNOB.format("FUSION_THRESHOLD") +
                              " (in bytes)"),
    "--cycle-time-ms": ("horovodrun", HOROVOD_KNOB.format("CYCLE_TIME")),
    "--cache-capacity": ("horovodrun", HOROVOD_KNOB.format("CACHE_CAPACITY")),
    "--hierarchical-allreduce": ("horovodrun", HOROVOD_KNOB.format("HIERARCHICAL_ALLREDUCE")),
    "--log-with-timestamp": ("horovodrun", "--timestamp-output"),
    "--prefix-output-with-timestamp": ("horovodrun", "--timestamp-output"),
    # PopRun
    "--process-placement": ("PopRun", PLACEMENT.replace(", and --mpi-global-args passes "
                                                        "other mpirun options on", "")),
}
# torchrun takes each of its options with "_" as well as "-"
PEERS.update({"--" + name[2:].replace("-", "_"): entry for name, entry in list(PEERS.items())
              if name.startswith("--") and "-" in name[2:]})

# Our options a program often has too: standing after the program name, no note.
PROGRAMS_TOO = {"-h", "--help", "-v", "--verbose", "--version", "--config", "--timeout", "-p",
                "-i", "-x", "--output-dir", "--env", "--backend"}


def answer(option_name: str, argv: Sequence[str]) -> Optional[str]:
    """The sentence for the other launcher's option click did not know (``option_name``, as click
    names it: the first letter for ``-hostfile``), found in ``argv``; None when it is none."""
    for word in _options_before_dashdash(argv):
        name = word.split("=", 1)[0]
        if name not in PEERS or not (name == option_name or (
                not name.startswith("--") and option_name[1:] in name[1:])):
            continue
        tool, ours = PEERS[name]
        return f"{name} is {tool}'s option, not poprun-lite's: {ours}."
    return None


def ours_after_program(args: Sequence[str], our_options: Iterable[str]) -> List[str]:
    """Our options among the program's arguments ``args`` (where, as mpirun does, they go to
    the program), less those programs often have too."""
    ours = set(our_options) - PROGRAMS_TOO
    return [word for word in dict.fromkeys(w.split("=", 1)[0]
                                           for w in _options_before_dashdash(args))
            if word in ours]


def _options_before_dashdash(argv: Sequence[str]) -> List[str]:
    words = []
    for word in argv:
        if word == "--":
            break
        if word.startswith("-") and word != "-":
            words.append(word)
    return words
