"""``python -m popdist_launcher.install horovod``: build Horovod against this environment's
TensorFlow and install it (see popdist_launcher.install.horovod_build)."""
from __future__ import annotations

import pathlib
import sys

import click

from popdist_launcher.install import horovod_build


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Set up pieces of this environment for popdist_launcher."""


@main.command()
@click.option("--version", "version", default=horovod_build.DEFAULT_VERSION, show_default=True,
              help="The Horovod release to build.")
@click.option("--rebuild", is_flag=True, help="Build and install it even where a Horovod that "
              "loads is installed (another version, other options, another TensorFlow).")
@click.option("--wheel-cache", type=click.Path(file_okay=False, path_type=pathlib.Path),
              default=None, help="Keep the built wheel in a folder of this one, named by the "
              "Horovod, TensorFlow and Python versions; a wheel already there is installed "
              "without building.")
@click.option("--gpu-operations", type=click.Choice(["NCCL"], case_sensitive=False),
              default=None, help="Build Horovod's GPU operations (needs CUDA and NCCL).")
@click.option("--mpi/--no-mpi", default=None, help="Build the MPI controller  [default: when "
              "an mpicc is found beside this Python or on PATH]")
@click.option("--no-deps", is_flag=True, help="Do not install Horovod's own dependencies "
              "(cloudpickle, psutil, PyYAML, packaging).")
@click.option("-q", "--quiet", is_flag=True, help="Only this command's own lines.")
def horovod(version, rebuild, wheel_cache, gpu_operations, mpi, no_deps, quiet) -> None:
    """Build Horovod against this environment's TensorFlow (Gloo, MPI where found) and
    install it."""
    def say(text: str) -> None:
        click.echo(f"install horovod: {text}", err=True)

    try:
        done = horovod_build.install(version, wheel_cache=wheel_cache, rebuild=rebuild,
                                     deps=not no_deps, mpi=mpi, quiet=quiet, say=say,
                                     gpu_operations=gpu_operations.upper() if gpu_operations
                                     else None)
    except horovod_build.BuildError as exc:
        say(f"{exc}.")
        sys.exit(1)
    say(done)


if __name__ == "__main__":
    main()
