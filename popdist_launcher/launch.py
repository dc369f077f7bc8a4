"""``poprun-lite``: the command line. Options -> LaunchPlan -> backend -> supervisor.

This module is on every job's start-up path: it never imports TensorFlow or Horovod.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional, Sequence, Tuple

import click

from popdist_launcher import __version__
from popdist_launcher.launcher import ports
from popdist_launcher.launcher import topology
from popdist_launcher.launcher import _say as verbosity
from popdist_launcher.launcher import job
from popdist_launcher.launcher.output import OutputDirError, OutputOptions
from popdist_launcher.launcher.plan import PlanError, check_counts, parse_exports, resolve_program
from popdist_launcher.launcher.remote import SshOptions

PROG = "poprun-lite"
ENV_PREFIX = "POPRUN"
# Options that are actions, not launch settings: never read from or written to config files.
NOT_CONFIGURABLE = {"config", "export_config", "print_topology", "check_build", "version",
                    "program", "args", "verbose"}


def _load_config(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    from popdist_launcher.launcher import config_file

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
    if param.multiple:
        return "strings"
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
    from popdist_launcher.launcher import check_build
    lines, problems = check_build.report()
    click.echo("\n".join(lines))
    if problems:
        click.echo("", err=True)
        for problem in problems:
            click.echo(f"{PROG}: missing: {problem}.", err=True)
        ctx.exit(1)
    click.echo("\nAll required components are present.")
    ctx.exit(0)


def _parse_port_range(ctx: click.Context, param: click.Parameter,
                      value: Optional[str]) -> Optional[Tuple[int, int]]:
    if value is None:
        return None
    low, sep, high = str(value).partition("-")
    if sep and low.isdigit() and high.isdigit() and 1024 <= int(low) <= int(high) <= 65535:
        return int(low), int(high)
    raise click.BadParameter(
        f"{value!r} is not a port range; expected LOW-HIGH with 1024 <= LOW <= HIGH <= 65535, "
        f"e.g. 20000-30000.")


MAX_SECONDS = 7 * 24 * 3600.0  # start timeout and grace period: at most a week
MAX_INSTANCES = 65536


def _seconds(zero_ok: bool):
    """Callback: a finite number of seconds, above 0 (or 0 allowed), at most MAX_SECONDS."""
    def check(ctx: click.Context, param: click.Parameter,
              value: Optional[float]) -> Optional[float]:
        if value is None:
            return None
        low = "0 or more" if zero_ok else "more than 0"
        if not (value >= 0 if zero_ok else value > 0) or not value <= MAX_SECONDS:
            raise click.UsageError(
                f"{param.opts[-1]} {value!r} is not a usable number of seconds; expected a finite "
                f"number, {low} and at most {MAX_SECONDS:g} (a week), e.g. "
                f"{param.default or 600:g}.", ctx)
        return value
    return check


def _instance_count(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if not 1 <= value <= MAX_INSTANCES:
        bound = "at least 1" if value < 1 else f"at most {MAX_INSTANCES}"
        raise click.UsageError(f"--num-instances must be {bound}, got {value}; pass how many "
                               f"processes to start, e.g. -np 4.", ctx)
    return value


def _shell_words(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Callback: the value must split like a shell command line (it is split with shlex)."""
    import shlex
    try:
        shlex.split(value or "")
    except ValueError as exc:
        raise click.UsageError(
            f"{param.opts[-1]} {value!r} cannot be split into arguments ({exc}); balance its "
            f"quotes as on a shell command line, e.g. \"--mca btl tcp,self\".", ctx) from None
    return value


def _text_hostfile(ctx: click.Context, param: click.Parameter,
                   value: Optional[str]) -> Optional[str]:
    """Callback: a readable hostfile must be text of reasonable size (a missing one, or one given
    with -H, is reported later, with the host options)."""
    if value is None or not os.access(value, os.R_OK):
        return value
    from popdist_launcher.launcher import hosts
    try:
        hosts.read_hostfile(value)
    except hosts.HostError as exc:
        raise click.UsageError(f"--hostfile {exc}", ctx) from None
    return value


def _export_path(ctx: click.Context, param: click.Parameter,
                 value: Optional[str]) -> Optional[str]:
    """Callback: --export-config's folder must exist and be writable."""
    if value is None:
        return None
    folder = os.path.dirname(value) or "."
    if not os.path.isdir(folder):
        raise click.UsageError(f"--export-config {value!r}: the folder {folder!r} does not exist; "
                               f"create it first or give a FILE in an existing folder.", ctx)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise click.UsageError(f"--export-config {value!r}: the folder {folder!r} is not writable "
                               f"by you; give a FILE in a folder you can write to.", ctx)
    return value


@click.command(
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"],
                      "show_default": True},
    epilog="Every option can also be set with a POPRUN_<OPTION> environment variable "
           "(e.g. POPRUN_NUM_INSTANCES=4) or a --config file; the command line wins.",
)
@click.option("-np", "--num-instances", type=int, default=1, callback=_instance_count,
              show_envvar=True,
              help="Number of instances (processes) to start.")
@click.option("--num-replicas", type=int, default=None, show_envvar=True,
              help="Total model replicas across all instances (default: one per instance); must "
                   "be a multiple of --num-instances.")
@click.option("--ipus-per-replica", type=int, default=1, show_envvar=True,
              help="Devices each replica uses (POPDIST_NUM_IPUS_PER_REPLICA).")
@click.option("-x", "--env", "env", multiple=True, metavar="NAME[=VALUE]", show_envvar=True,
              help="Export a variable to every instance; NAME alone passes the current value. "
                   "Repeatable.")
@click.option("--only-output-from-instance", type=int, default=None, metavar="N",
              show_envvar=True, help="Show only instance N's output on the console "
                                     "(--output-dir still gets every instance's).")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Also write attempt-<n>/instance-<i>.stdout.log and .stderr.log here (one "
                   "folder per attempt; .stacks.log when stacks were collected).")
@click.option("--tag-output/--no-tag-output", default=True, show_envvar=True,
              help="Prefix each line with [instance]<stream>:.")
@click.option("--start-timeout", type=float, default=120.0, callback=_seconds(False),
              show_envvar=True,
              help="Seconds allowed for every instance to start and for Horovod's rendezvous.")
@click.option("--grace-period", type=float, default=10.0, callback=_seconds(True),
              show_envvar=True,
              help="Seconds between the stop signal (SIGTERM, or the SIGINT/SIGHUP poprun-lite "
                   "received) and SIGKILL when the job is stopped.")
@click.option("--timeout", type=float, default=None, callback=_seconds(False), show_envvar=True,
              help="Seconds the whole job may run; then every instance's Python stacks are "
                   "printed (and saved in --output-dir) and the job is stopped (exit code 124). "
                   "SIGQUIT to poprun-lite prints the stacks at any time.  [default: none]")
@click.option("--port-range", default=None, metavar="LOW-HIGH", callback=_parse_port_range,
              show_envvar=True, help="Where to look for free TF_CONFIG ports "
                                     "[default: below the kernel's ephemeral range].")
@click.option("-H", "--host", "host", default=None, metavar="HOST[:SLOTS],...", show_envvar=True,
              help="Hosts to run on, with slots (instances each may run; 1 when omitted); "
                   "ranges such as node[0-3]:2 work. Default: this host only.")
@click.option("--hostfile", type=click.Path(dir_okay=False), default=None,
              callback=_text_hostfile, show_envvar=True,
              help="File of 'HOSTNAME slots=N' lines (# comments), instead of -H.")
@click.option("--oversubscribe", is_flag=True, show_envvar=True,
              help="Allow more instances than slots on the hosts.")
@click.option("--backend", type=click.Choice(["auto", "local", "ssh", "mpi", "slurm"]),
              default="auto", show_envvar=True,
              help="How instances start: auto = on this host alone, mpi when Open MPI's "
                   "mpirun and a Horovod built with MPI are installed (local otherwise, and for "
                   "-np 1); slurm inside a Slurm allocation; ssh for other hosts. mpi = Open "
                   "MPI's mpirun (Horovod's MPI controller); local = the launcher starts each "
                   "instance itself (Horovod over Gloo).")
@click.option("--ssh-port", type=click.IntRange(1, 65535), default=None, show_envvar=True,
              help="Port of the hosts' ssh servers [default: ssh's own].")
@click.option("--ssh-identity", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="Private key file for ssh (-i).")
@click.option("--ssh-config", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="ssh_config file for ssh (-F); its host aliases are honoured.")
@click.option("--network-interface", default=None, metavar="NAME", show_envvar=True,
              help="Network interface (same name on every host) for TF_CONFIG addresses, "
                   "Horovod's Gloo and the rendezvous.")
@click.option("--host-subnet", default=None, metavar="CIDR", show_envvar=True,
              help="Use each host's address in this subnet, e.g. 10.1.0.0/16.")
@click.option("--mpi-global-args", default="", metavar="ARGS", callback=_shell_words,
              show_envvar=True,
              help="Extra arguments for mpirun (mpi backend), e.g. \"--mca btl tcp,self\".")
@click.option("--mpi-local-args", default="", metavar="ARGS", callback=_shell_words,
              show_envvar=True,
              help="Extra arguments for each instance's part of the mpirun command line.")
@click.option("--max-restarts", type=click.IntRange(0), default=0, show_envvar=True,
              help="When an instance fails, stop the job everywhere and start it again, up to "
                   "this many times (POPRUN_RESTART_COUNT tells the program the attempt).")
@click.option("--print-topology", is_flag=True, show_envvar=True,
              help="Print instances, replicas, ports and each instance's environment; start "
                   "nothing.")
@click.option("--config", type=str, default=None, is_eager=True, expose_value=False,
              callback=_load_config, show_envvar=True, metavar="FILE",
              help="Read option values from a TOML or YAML file (a name under configs/ works).")
@click.option("--export-config", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=_export_path, show_envvar=True,
              help="Write the effective options to FILE (TOML, or YAML for .yaml), then run.")
@click.option("--check-build", is_flag=True, is_eager=True, expose_value=False,
              callback=_check_build, help="Show the versions and build options of TensorFlow, "
                                         "Horovod, MPI, mpi4py and gRPC, then exit.")
@click.option("-v", "--verbose", count=True, help="Log what the launcher does (-vv for more).")
@click.version_option(__version__, "--version", prog_name=PROG)
@click.argument("program")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def cli(ctx: click.Context, num_instances: int, num_replicas: Optional[int], ipus_per_replica: int,
        env: Sequence[str], only_output_from_instance: Optional[int], output_dir: Optional[str],
        tag_output: bool, start_timeout: float, grace_period: float, timeout: Optional[float],
        port_range: Optional[Tuple[int, int]], host: Optional[str], hostfile: Optional[str],
        oversubscribe: bool, backend: str, ssh_port: Optional[int], ssh_identity: Optional[str],
        ssh_config: Optional[str], network_interface: Optional[str], host_subnet: Optional[str],
        mpi_global_args: str, mpi_local_args: str, max_restarts: int, print_topology: bool,
        export_config: Optional[str], verbose: int, program: str, args: Sequence[str]) -> int:
    """Run PROGRAM [ARGS]... as NUM_INSTANCES cooperating instances.

    Each instance gets its PopDist variables, a TF_CONFIG and what a plain hvd.init() needs.
    A PROGRAM ending in .py runs with this Python.
    """
    _configure_logging(verbose)
    try:
        check_counts(num_instances, num_replicas, ipus_per_replica)
        if grace_period < 0:
            raise PlanError(f"--grace-period must be 0 or more seconds, got {grace_period:g}.")
        if only_output_from_instance is not None and not 0 <= only_output_from_instance < num_instances:
            raise PlanError(
                f"--only-output-from-instance {only_output_from_instance} is not an instance of "
                f"this job; expected 0..{num_instances - 1}.")
        argv = resolve_program(program, args)
        exported = parse_exports(env, os.environ)
        layout = topology.choose(
            num_instances, host=host, hostfile=hostfile, oversubscribe=oversubscribe,
            backend=backend, environ=os.environ, subnet=host_subnet, iface=network_interface,
            mpi_global_args=mpi_global_args, mpi_local_args=mpi_local_args,
            ssh=SshOptions(ssh_port, ssh_identity, ssh_config, start_timeout))
    except (PlanError, topology.TopologyError) as exc:
        raise click.UsageError(str(exc), ctx) from None

    if export_config:
        from popdist_launcher.launcher import config_file

        try:
            config_file.dump(export_config, _configurable_values(ctx))
        except config_file.ConfigFileError as exc:
            raise click.UsageError(str(exc), ctx) from None

    output = OutputOptions(tag_output=tag_output, only_instance=only_output_from_instance,
                           output_dir=output_dir)
    options = job.JobOptions(argv, num_instances, num_replicas, ipus_per_replica, exported,
                             start_timeout, grace_period, port_range, max_restarts, timeout, output)
    try:
        return job.run(layout, options, _say, click.echo if print_topology else None)
    except OutputDirError as exc:
        raise click.UsageError(str(exc), ctx) from None
    except (ports.PortError, topology.TopologyError) as exc:
        raise click.ClickException(str(exc)) from None


def _configurable_values(ctx: click.Context) -> Dict[str, Any]:
    values = {}
    for param in ctx.command.params:
        if param.name in NOT_CONFIGURABLE or param.name not in ctx.params:
            continue
        value = ctx.params[param.name]
        if param.name == "port_range" and value is not None:
            value = f"{value[0]}-{value[1]}"
        values[param.name] = list(value) if isinstance(value, tuple) else value
    return values


def _say(message: str) -> None:
    click.echo(message, err=True)


def _configure_logging(verbose: int) -> None:
    verbosity.verbose = verbose


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: click's errors become one line on stderr and exit code 2, never a traceback."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name=PROG,
                        standalone_mode=False, auto_envvar_prefix=ENV_PREFIX)
    except click.UsageError as exc:
        click.echo(f"{PROG}: error: {exc.format_message()} (see {PROG} --help)", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        return 130
    return code if isinstance(code, int) else 0


def run() -> None:
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing left to finalize: skipping the interpreter's teardown saves ~25 ms


if __name__ == "__main__":
    run()
