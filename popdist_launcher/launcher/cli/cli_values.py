"""The checks of single option values for ``poprun-lite``'s click options (port ranges, seconds,
GPU counts, shell words, instance lists, PopRun's per-instance mpirun arguments, the config
file to export): each a click callback that returns the value or raises one clear sentence."""
from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple

import click


def parse_port_range(ctx: click.Context, param: click.Parameter,
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


def seconds(zero_ok: bool):
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


def gpus_per_instance(ctx: click.Context, param: click.Parameter, value: str) -> str:
    value = str(value).strip().lower()
    if value in ("auto", "none") or value.isdigit() and int(value) >= 1:
        return value
    raise click.UsageError(f"--gpus-per-instance {value!r} is not auto, none or a number of GPUs "
                           f"of 1 or more; e.g. --gpus-per-instance auto (one GPU per local "
                           f"replica).", ctx)


def flag(param: click.Parameter) -> str:
    """The option's first long name (its own, before peers' aliases)."""
    return next(o for o in param.opts if o.startswith("--"))


def shell_words(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Callback: the value must split like a shell command line (it is split with shlex)."""
    import shlex
    try:
        shlex.split(value or "")
    except ValueError as exc:
        raise click.UsageError(
            f"{flag(param)} {value!r} cannot be split into arguments ({exc}); balance its "
            f"quotes as on a shell command line, e.g. \"--mca btl tcp,self\".", ctx) from None
    return value


def instance_list(ctx: click.Context, param: click.Parameter,
                   value: Optional[str]) -> Optional[Tuple[int, ...]]:
    """Callback: ``N`` or ``N,M,...`` (instance indices); checked against -np later."""
    if value is None:
        return None
    parts = [p.strip() for p in str(value).split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise click.UsageError(f"{flag(param)} {value!r} is not a list of instance indices; "
                               f"expected N or N,M,... such as 0 or 0,1.", ctx)
    return tuple(sorted({int(p) for p in parts}))


def instance_args(ctx: click.Context, param: click.Parameter,
                   value: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    """Callback: PopRun's ``I:"ARGS"`` items (instance index, mpirun arguments)."""
    import shlex
    items = []
    for item in value:
        index, sep, words = item.partition(":")
        problem = None
        if not sep or not index.strip().isdigit():
            problem = "has no instance index"
        else:
            try:
                shlex.split(words)
            except ValueError as exc:
                problem = f"cannot be split into arguments ({exc})"
        if problem:
            raise click.UsageError(
                f"--instance-mpi-local-args {item!r} {problem}; expected INDEX:\"ARGS\", e.g. "
                f"--instance-mpi-local-args 0:\"-x FOO=1\".", ctx)
        items.append((int(index), words))
    return tuple(items)


def export_path(ctx: click.Context, param: click.Parameter,
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
