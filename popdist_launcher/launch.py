"""``poprun-lite``: the command line, and the console script's entry point (``main``).
Options -> JobOptions -> agent (plan, backend, supervisor).

This module is on every job's start-up path: it never imports TensorFlow or Horovod.
"""
from __future__ import annotations

import gc
import os
import signal

# An interrupt while this module loads ends the command with 130, not a traceback (Python's
# KeyboardInterrupt comes back at the end of this module; an ignored SIGINT stays ignored).
_LOADING_INTERRUPTED = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if _LOADING_INTERRUPTED:
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

# The imports below (click's and the launcher's) allocate tens of thousands of objects and no
# garbage: the cyclic collector's passes over them cost ~5 ms of every start-up. Off until the
# end of this module.
_COLLECTING = gc.isenabled()
gc.disable()

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from popdist_launcher import __version__, tf_config as tf_config_lib
from popdist_launcher.launcher.output import console
from popdist_launcher.launcher.layout import ports
from popdist_launcher.launcher.layout import topology
from popdist_launcher.launcher.agents.run_job import run_job
from popdist_launcher.launcher import options as options_lib
from popdist_launcher.launcher.cli import peer_options
from popdist_launcher.launcher.cli import cli_values
from popdist_launcher.launcher.output.routing import OutputDirError
from popdist_launcher.launcher.layout.backends.registry import BACKENDS
from popdist_launcher.launcher.layout.plan import PlanError
from popdist_launcher.wire.placement_text import BIND_MODES

PROG = console.NAME
ENV_PREFIX = "POPRUN"
# Options that are actions, not launch settings: never read from or written to config files.
NOT_CONFIGURABLE = {"config", "export_config", "overwrite_config", "print_topology",
                    "check_build", "version", "program", "args", "verbose"}
# PopRun's options for Graphcore IPU hardware (V-IPU partitions, IPU-Link domains, Poplar's
# executable cache): accepted so that PopRun's commands run, with one line saying they do nothing.
IPU_ONLY = {
    "num_ilds": int, "vipu_server_host": str, "vipu_server_port": int,
    "vipu_server_timeout": float, "vipu_partition": str, "vipu_partition_attempts": int,
    "vipu_cluster": str, "vipu_allocation": str, "executable_cache_path": str,
    "update_partition": bool, "reset_partition": bool, "remove_partition": bool,
    "offline_mode": bool,
}
TRUE_WORDS, FALSE_WORDS = ("yes", "true", "1", "on"), ("no", "false", "0", "off")


def _ipu_only(function):
    """Declare IPU_ONLY's options (hidden from --help; the epilog names them)."""
    for name, kind in reversed(list(IPU_ONLY.items())):
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            function = click.option(f"{flag}/--no-{flag[2:]}", name, default=False,
                                    hidden=True)(function)
        else:
            function = click.option(flag, name, type=kind, default=None, hidden=True)(function)
    return function


def _boolean_values(argv: Sequence[str]) -> List[str]:
    """PopRun's ``--flag=yes|no`` (and true/false, 1/0, on/off) for every on/off option, as the
    bare ``--flag`` or ``--no-flag``; the program and its arguments are left alone."""
    on_off: Dict[str, Tuple[str, Optional[str]]] = {}
    takes_value = set()
    for param in cli.params:
        if not isinstance(param, click.Option):
            continue
        if param.is_flag and not param.count:
            off = param.secondary_opts[0] if param.secondary_opts else None
            for name in param.opts:
                on_off[name] = (name, off)
            for name in param.secondary_opts:
                on_off[name] = (name, param.opts[0])
        elif not param.count:
            takes_value.update(param.opts)
    out: List[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-") or word == "-":
            return out + words[i:]
        name, eq, value = word.partition("=")
        if eq and name in on_off:
            truth = value.strip().lower()
            if truth not in TRUE_WORDS + FALSE_WORDS:
                raise click.UsageError(
                    f"{word!r}: {name} takes yes or no (also true/false, 1/0, on/off), got "
                    f"{value!r}; write e.g. {name}=yes, or {name} alone.")
            same, opposite = on_off[name]
            chosen = same if truth in TRUE_WORDS else opposite
            if chosen is not None:
                out.append(chosen)
        elif word in takes_value and i + 1 < len(words):
            out += [word, words[i + 1]]
            i += 1
        else:
            out.append(word)
        i += 1
    return out


def _load_config(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    from popdist_launcher.launcher.cli import config_file

    kinds = {p.name: _config_kind(p) for p in ctx.command.params
             if p.name not in NOT_CONFIGURABLE}
    try:
        values = config_file.load(value, kinds)
    except config_file.ConfigFileError as exc:
        raise click.UsageError(str(exc), ctx) from None
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


def _config_kind(param: click.Parameter) -> str:
    """What a config file must give for this option (a key of config_file.KINDS)."""
    if param.name == "only_output_from_instance":
        return "instances"
    if param.multiple:
        return "strings"
    if param.nargs == 2:
        return "pair"
    if getattr(param, "is_flag", False):
        return "boolean"
    if isinstance(param.type, click.types.IntParamType):
        return "integer"
    if isinstance(param.type, click.types.FloatParamType):
        return "number"
    return "string"


def _check_build(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from popdist_launcher.install import check_build
    found = check_build.report()
    click.echo("\n".join(found.lines))
    if found.gaps:
        click.echo("")
    for gap in found.gaps:
        click.echo(f"{'missing' if gap.required else 'optional'}: {gap.text()}.")
    if found.failed:
        ctx.exit(1)
    click.echo("\nEverything the library needs is present"
               + (" (the optional pieces above add features)." if found.gaps else "."))
    ctx.exit(0)


@click.command(
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"],
                      "show_default": True},
    epilog="Every option can also be set with a POPRUN_<OPTION> environment variable "
           "(e.g. POPRUN_NUM_INSTANCES=4) or a --config file; the command line wins. On/off "
           "options also take PopRun's --OPTION=yes|no (true/false, 1/0, on/off).\n\n"
           "PopRun's IPU options are accepted and have no effect (one line says so): "
           + ", ".join("--" + n.replace("_", "-") for n in IPU_ONLY) + ".",
)
@click.option("-np", "--num-instances", type=int, default=None, show_envvar=True,
              help="Number of instances (processes) to start.  [default: one per slot of -H or "
                   "--hostfile (one per host named without slots), else 1]")
@click.option("--num-replicas", type=int, default=None, show_envvar=True,
              help="Total model replicas across all instances (default: one per instance); must "
                   "be a multiple of --num-instances.")
@click.option("--ipus-per-replica", type=int, default=1, show_envvar=True,
              help="Devices each replica uses (POPDIST_NUM_IPUS_PER_REPLICA).")
@click.option("-x", "--env", "env", multiple=True, metavar="NAME[=VALUE]", show_envvar=True,
              help="Export a variable to every instance; NAME alone passes the current value. "
                   "Repeatable.")
@click.option("--only-output-from-instance", "--local-ranks-filter", "only_output_from_instance",
              default=None, metavar="N[,N...]", callback=cli_values.instance_list, show_envvar=True,
              help="Show only these instances' output on the console (--output-dir still gets "
                   "every instance's). Instance indices count across hosts (torchrun's "
                   "--local-ranks-filter counts per host: the same on one host).")
@click.option("--output-dir", "--output-filename", "output_dir",
              type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Also write attempt-<n>/instance-<i>.stdout.log and .stderr.log here (one "
                   "folder per attempt; .stacks.log when stacks were collected).")
@click.option("--tag-output/--no-tag-output", default=True, show_envvar=True,
              help="Prefix each line with [instance]<stream>:.")
@click.option("--tag-output-host/--no-tag-output-host", default=False, show_default=False,
              show_envvar=True,
              help="Put the instance's host in the tag: [instance@host]<stream>:.")
@click.option("--timestamp-output/--no-timestamp-output", default=False, show_default=False,
              show_envvar=True,
              help="Start each line, on the console and in --output-dir's logs, with its time "
                   "of arrival: [YYYY-MM-DDTHH:MM:SS.mmm] (local time), as mpirun's option.")
@click.option("--start-timeout", type=float, default=120.0, callback=cli_values.seconds(False),
              show_envvar=True,
              help="Seconds allowed for every instance to start and for Horovod's rendezvous.")
@click.option("--grace-period", type=float, default=10.0, callback=cli_values.seconds(True),
              show_envvar=True,
              help="Seconds between the stop signal (SIGTERM, or the SIGINT/SIGHUP poprun-lite "
                   "received) and SIGKILL when the job is stopped.")
@click.option("--timeout", type=float, default=None, callback=cli_values.seconds(False),
              show_envvar=True,
              help="Seconds the whole job may run; then every instance's Python stacks are "
                   "printed (and saved in --output-dir) and the job is stopped (exit code 124). "
                   "SIGQUIT to poprun-lite prints the stacks at any time.  [default: none]")
@click.option("--hang-timeout", type=float, default=None, callback=cli_values.seconds(True),
              show_envvar=True, metavar="SECONDS",
              help="The hang check's short bounds: an instance stopped, left waiting once its "
                   "peers ended, waiting in another collective than its peers, or whose own "
                   "threads stay blocked (no CPU, no I/O) while its peers wait, is hung after "
                   "SECONDS: named with the evidence, its stack printed, killed, failed "
                   "(docs/job-end.md, 'Hung instances'). 0 turns the check off.  [default: 30 s "
                   "for a stopped or lone instance, 180 s for an absent or blocked one, or 5 x "
                   "the longest interval between the job's events if longer]")
@click.option("--hang-busy-timeout", type=float, default=None,
              callback=cli_values.seconds(False), show_envvar=True, metavar="SECONDS",
              help="How long one instance may run its own code (CPU, I/O or a moving stack) "
                   "while its peers wait for it before the hang check calls it hung; never "
                   "less than --hang-timeout.  [default: 600 s, or 5 x the longest interval "
                   "between the job's events if longer]")
@click.option("--port-range", default=None, metavar="LOW-HIGH",
              callback=cli_values.parse_port_range, show_envvar=True,
              help="Where to look for free TF_CONFIG ports "
                   "[default: below the kernel's ephemeral range].")
@click.option("-H", "--host", "host", default=None, metavar="HOST[:SLOTS],...", show_envvar=True,
              help="Hosts to run on. With slots (NAME:SLOTS, mpirun's rule) each runs at most "
                   "SLOTS instances (1 for a host named without); with no slots at all "
                   "(-H nodeA,nodeB, PopRun's rule) the instances are divided evenly. Ranges "
                   "such as node[0-3]:2 work. Default: this host only.")
@click.option("--hostfile", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="File of 'HOSTNAME [slots=N]' lines (# comments), instead of -H; a plain list "
                   "of host names (PopRun's hostfile) divides the instances evenly.")
@click.option("--oversubscribe/--no-oversubscribe", default=False, show_default=False,
              show_envvar=True,
              help="Allow more instances than slots on the hosts.")
@click.option("--backend", type=click.Choice(BACKENDS),
              default="auto", show_envvar=True,
              help="How instances start: auto = on this host alone, mpi when Open MPI's "
                   "mpirun and a Horovod built with MPI are installed (local otherwise, and for "
                   "-np 1); slurm inside a Slurm allocation; ssh for other hosts. mpi = Open "
                   "MPI's mpirun (Horovod's MPI controller); local = the launcher starts each "
                   "instance itself (Horovod over Gloo).")
@click.option("-p", "--ssh-port", type=click.IntRange(1, 65535), default=None, show_envvar=True,
              help="Port of the hosts' ssh servers [default: ssh's own].")
@click.option("-i", "--ssh-identity", "--ssh-identity-file", "ssh_identity",
              type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="Private key file for ssh (-i).")
@click.option("--ssh-config", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="ssh_config file for ssh (-F); its host aliases are honoured.")
@click.option("--network-interface", default=None, metavar="NAME", show_envvar=True,
              help="Network interface (same name on every host) for TF_CONFIG addresses, "
                   "Horovod's Gloo and the rendezvous.")
@click.option("--host-subnet", default=None, metavar="CIDR", show_envvar=True,
              help="Use each host's address in this subnet, e.g. 10.1.0.0/16.")
@click.option("--mpi-global-args", "--mpi-args", "mpi_global_args", default="", metavar="ARGS",
              callback=cli_values.shell_words,
              show_envvar=True,
              help="Extra arguments for mpirun (mpi backend), e.g. \"--mca btl tcp,self\".")
@click.option("--mpi-local-args", default="", metavar="ARGS", callback=cli_values.shell_words,
              show_envvar=True,
              help="Extra arguments for each instance's part of the mpirun command line.")
@click.option("--instance-mpi-local-args", multiple=True, metavar='I:"ARGS"',
              callback=cli_values.instance_args, show_envvar=True,
              help="More mpirun arguments for instance I only (mpi backend; each run of "
                   "instances with the same arguments becomes one mpirun app context), e.g. "
                   "0:\"-x DEBUG=1\". Repeatable. Other backends ignore it and say so.")
@click.option("--numa-aware/--no-numa-aware", default=False, show_default=False,
              show_envvar=True,
              help="PopRun's NUMA binding: the same as --bind-to numa.")
@click.option("--bind-to", type=click.Choice(BIND_MODES), default="none",
              show_envvar=True,
              help="Bind each instance to CPUs of its host: core = a contiguous block of whole "
                   "cores per instance on that host, numa = a NUMA node each (round-robin); "
                   "the instance's wrapper binds itself and the program inherits it.")
@click.option("--thread-budget/--no-thread-budget", default=True, show_envvar=True,
              help="Set OMP_NUM_THREADS and TF_NUM_INTRAOP_THREADS to the CPUs of each instance "
                   "(its binding, or its host's CPUs divided among the instances there) and "
                   "TF_NUM_INTEROP_THREADS to at most 2; a variable the instance's environment "
                   "or -x sets is left alone.")
@click.option("--gpus-per-instance", default="auto", metavar="auto|none|N",
              callback=cli_values.gpus_per_instance, show_envvar=True,
              help="Give each instance its own GPUs through CUDA_VISIBLE_DEVICES (and "
                   "TF_FORCE_GPU_ALLOW_GROWTH=true): auto = one per local replica, N = N each, "
                   "none = leave CUDA_VISIBLE_DEVICES alone. Hosts without GPUs get nothing.")
@click.option("--report-bindings/--no-report-bindings", default=False, show_default=False,
              show_envvar=True,
              help="Print one line per instance, from its host, with its CPUs, NUMA node, "
                   "thread budget and GPUs.")
@click.option("--timeline-filename", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", show_envvar=True,
              help="Record a Horovod timeline in FILE (HOROVOD_TIMELINE), as horovodrun's option.")
@click.option("--autotune/--no-autotune", default=False, show_default=False,
              show_envvar=True,
              help="Let Horovod tune its fusion and cycle parameters (HOROVOD_AUTOTUNE=1).")
@click.option("--autotune-log-file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", show_envvar=True,
              help="Where --autotune logs what it tried (HOROVOD_AUTOTUNE_LOG).")
@click.option("--tf-config", type=click.Choice(tf_config_lib.MODES), default=tf_config_lib.AUTO,
              show_envvar=True,
              help="The TF_CONFIG each instance gets: auto = every instance a worker (worker 0 "
                   "is the chief), applied where the program asks for a cluster "
                   "(MultiWorkerMirroredStrategy, IPUMultiWorkerStrategy, a RunConfig with one "
                   "of them) while a plain tf.estimator RunConfig sees none, as under horovodrun; "
                   "worker = the same cluster, seen by every RunConfig; chief = instance 0 is the "
                   "\"chief\" task and the others workers 0..N-2 (tf.estimator's distributed "
                   "mode); none = no TF_CONFIG.")
@click.option("--tf1/--no-tf1", default=False, show_default=False, show_envvar=True,
              help="Run TensorFlow with TensorFlow 1.15's behaviour (graph mode, v1 control flow "
                   "and variables), as Graphcore's TF1 SDKs did, for programs written for them "
                   "(import tensorflow.compat.v1 as tf, no disable_v2_behavior()): sets "
                   "POPDIST_TF1=1 for every instance and the evaluator.")
@click.option("--evaluator/--no-evaluator", default=False, show_default=False, show_envvar=True,
              help="Also run one evaluator process on this host, outside the training world "
                   "(no PopDist or Horovod variables, not counted in -np), with TF_CONFIG task "
                   "\"evaluator\" in the instances' cluster: tf.estimator.train_and_evaluate's "
                   "evaluator. The job waits for it to finish; its failure fails the job.")
@click.option("--max-restarts", type=click.IntRange(0), default=0, show_envvar=True,
              help="When an instance fails, stop the job everywhere and start it again, up to "
                   "this many times (POPRUN_RESTART_COUNT tells the program the attempt).")
@click.option("--min-np", type=int, default=None, show_envvar=True,
              help="Elastic: the fewest instances the job runs with; below it for longer than "
                   "--elastic-timeout the job ends.  [default: -np]")
@click.option("--max-np", type=int, default=None, show_envvar=True,
              help="Elastic: the most instances the job runs with.  [default: every slot the "
                   "hosts offer]")
@click.option("--host-discovery-script", default=None, metavar="COMMAND", show_envvar=True,
              help="Elastic: a command printing the hosts available now, one 'host' or "
                   "'host:slots' per line; run at start and every second while the job runs.")
@click.option("--slots-per-host", type=int, default=None, show_envvar=True,
              help="Elastic: slots of a host named without (a bare discovery line, -H NAME).  "
                   "[default: 1]")
@click.option("--elastic-timeout", type=float, default=None, callback=cli_values.seconds(False),
              show_envvar=True,
              help="Elastic: seconds the job may stay below --min-np (waiting for hosts) before "
                   "it ends.  [default: 600]")
@click.option("--reset-limit", type=int, default=None, show_envvar=True,
              help="Elastic: the most times the job may re-form after a failure or a host "
                   "change.  [default: no limit]")
@click.option("--host-failure-limit", type=int, default=None, show_envvar=True,
              help="Elastic: a host whose instances fail this many times in a row without "
                   "progress (see docs/elastic.md, 'Failures that repeat') is blacklisted when "
                   "other hosts can carry the job, else the job ends.  [default: 3]")
@click.option("--blacklist-cooldown-range", type=int, nargs=2, default=None,
              metavar="LOW HIGH", show_envvar=True,
              help="Elastic: a failed host may return after LOW..HIGH seconds (doubling with "
                   "each failure).  [default: a failed host never returns]")
@click.option("--elastic-mode", type=click.Choice(["auto", "horovod", "restart"]),
              default="auto", show_envvar=True,
              help="Elastic: horovod = Horovod's elastic protocol (survivors keep running; "
                   "hvd.elastic programs), restart = stop every instance and start the job again "
                   "on the hosts left (any program; resume from its checkpoint); auto = horovod "
                   "when the program's source uses hvd.elastic.")
@click.option("--print-topology/--no-print-topology", default=False, show_default=False,
              show_envvar=True,
              help="Print instances, replicas, ports and each instance's environment; start "
                   "nothing.")
@click.option("--config", "--import-config", "config", type=str, default=None, is_eager=True,
              expose_value=False, callback=_load_config, show_envvar=True, metavar="FILE",
              help="Read option values from a TOML or YAML file (a name under configs/ works); "
                   "the command line overrides them.")
@click.option("--export-config", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=cli_values.export_path, show_envvar=True,
              help="Write the effective options to FILE (TOML, or YAML for .yaml), then run. "
                   "An existing FILE is kept (an error) unless --overwrite-config.")
@click.option("--overwrite-config/--no-overwrite-config", default=False, show_default=False,
              show_envvar=True,
              help="Let --export-config replace an existing file.")
@click.option("--check-build", is_flag=True, is_eager=True, expose_value=False,
              callback=_check_build, help="Show what this environment has (TensorFlow, Keras, "
                                         "Horovod, MPI, mpi4py, gRPC, GPUs, backends), what "
                                         "each missing piece stops and the command that adds "
                                         "it, then exit (1 if the library cannot run).")
@click.option("-v", "--verbose", count=True, help="Log what the launcher does (-vv for more).")
@click.version_option(__version__, "--version", prog_name=PROG)
@_ipu_only
@click.argument("program")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def cli(ctx: click.Context, verbose: int, export_config: Optional[str], overwrite_config: bool,
        instance_mpi_local_args: Tuple[Tuple[int, str], ...], print_topology: bool,
        **_: Any) -> int:
    """Run PROGRAM [ARGS]... as NUM_INSTANCES cooperating instances.

    Each instance gets its PopDist variables, a TF_CONFIG and what a plain hvd.init() needs.
    A PROGRAM ending in .py runs with this Python.
    """
    console.verbose = verbose
    try:
        options = options_lib.build(ctx.params, os.environ)
    except (PlanError, topology.TopologyError) as exc:
        raise click.UsageError(str(exc), ctx) from None
    ctx.params["num_instances"] = options.num_instances  # as --export-config writes it

    if export_config:
        from popdist_launcher.launcher.cli import config_file

        try:
            config_file.dump(export_config, _configurable_values(ctx), overwrite=overwrite_config)
        except config_file.ConfigFileError as exc:
            raise click.UsageError(str(exc), ctx) from None

    misplaced = peer_options.ours_after_program(
        ctx.params["args"], (name for p in cli.params for name in p.opts + p.secondary_opts))
    if misplaced:
        program, one = ctx.params["program"], len(misplaced) == 1
        console.say(f"note: {', '.join(misplaced)} after {program} go{'es' if one else ''} to "
                    f"the program, as with mpirun, not to {PROG}; for {PROG}, put "
                    f"{'it' if one else 'them'} before the program "
                    f"({PROG} {misplaced[0]} ... {program}).")
    ipu_only = {name: value for name, value in ctx.params.items() if name in IPU_ONLY}
    for line in _inert_notes(ipu_only, instance_mpi_local_args and
                             options.layout.controller != "mpi"):
        console.say(f"note: {line}")
    try:
        return run_job(options, click.echo if print_topology else None)
    except OutputDirError as exc:
        raise click.UsageError(str(exc), ctx) from None
    except (ports.PortError, topology.TopologyError) as exc:
        raise click.ClickException(str(exc)) from None


def _inert_notes(ipu_only: Dict[str, Any], instance_args_unused: bool) -> List[str]:
    """One line for each kind of accepted option that does nothing here."""
    notes = []
    given = ["--" + name.replace("_", "-") for name, value in ipu_only.items()
             if value not in (None, False)]
    if given:
        notes.append(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect here: "
                     f"PopRun's IPU options configure Graphcore IPU hardware (V-IPU partitions, "
                     f"IPU-Link domains, Poplar's executable cache), which {PROG} does not use.")
    if instance_args_unused:
        notes.append("--instance-mpi-local-args has no effect on this backend: it adds mpirun "
                     "arguments for single instances; use --backend mpi to apply them.")
    return notes


def _configurable_values(ctx: click.Context) -> Dict[str, Any]:
    values = {}
    for param in ctx.command.params:
        if param.name in NOT_CONFIGURABLE or param.name not in ctx.params:
            continue
        value = ctx.params[param.name]
        if param.name in IPU_ONLY and value in (None, False):
            continue  # PopRun's IPU options: written only when given
        if param.name == "port_range" and value is not None:
            value = f"{value[0]}-{value[1]}"
        if param.name == "instance_mpi_local_args":
            value = [f"{index}:{words}" for index, words in value]
        values[param.name] = list(value) if isinstance(value, tuple) else value
    return values


def run(argv: Sequence[str]) -> int:
    """The command line with ``argv`` (without the program name), in this process; the exit
    code. click's errors become one line on stderr and exit code 2, never a traceback."""
    try:
        words = _boolean_values(argv)
        code = cli.main(args=words, prog_name=PROG,
                        standalone_mode=False, auto_envvar_prefix=ENV_PREFIX)
    except click.NoSuchOption as exc:
        peer = peer_options.answer(exc.option_name, argv)
        console.say(f"error: {peer or exc.format_message()} (see {PROG} --help)")
        return exc.exit_code
    except click.UsageError as exc:
        console.say(f"error: {exc.format_message()} (see {PROG} --help)")
        return exc.exit_code
    except click.ClickException as exc:
        console.say(f"error: {exc.format_message()}")
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        return 130
    return code if isinstance(code, int) else 0


def main() -> None:
    """The ``poprun-lite`` command (console script, ``python -m popdist_launcher``): runs the
    command line with ``sys.argv`` and ends the process with its exit code."""
    console.open_standard_streams()
    code = run(sys.argv[1:])
    console.flush_standard_streams()
    os._exit(code)  # nothing left to finalize: skipping the interpreter's teardown saves ~25 ms


gc.freeze()  # what the imports made lives as long as the launcher: never scanned again
if _COLLECTING:
    gc.enable()
if _LOADING_INTERRUPTED:
    signal.signal(signal.SIGINT, signal.default_int_handler)

if __name__ == "__main__":
    main()
