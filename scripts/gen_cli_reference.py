"""Write docs/cli-reference.md from the ``poprun-lite`` command itself, so that the option
reference cannot drift from the CLI (tests/test_docs.py fails when the file is out of date).

    python scripts/gen_cli_reference.py           # (re)write docs/cli-reference.md
    python scripts/gen_cli_reference.py --check   # exit 1 when the file differs

The command is found through the ``poprun-lite`` console-script entry point (installed metadata,
else setup.cfg), never by a module path, so moving the command's module changes nothing here.
"""
from __future__ import annotations

import argparse
import configparser
import importlib
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

import click

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "cli-reference.md")
SCRIPT = "poprun-lite"
REGENERATE = "python scripts/gen_cli_reference.py"


class _Found(Exception):
    """Raised from inside click.Command.main to hand back the command and its main() arguments."""

    def __init__(self, command: click.Command, kwargs: Dict[str, Any]) -> None:
        super().__init__()
        self.command, self.kwargs = command, kwargs


def _entry_point_value() -> Tuple[str, str]:
    """The console script's ``module:function``: the installed metadata first (what the
    ``poprun-lite`` on PATH runs), else this tree's setup.cfg (an install made before a move)."""
    from importlib.metadata import entry_points

    values = [ep.value for ep in entry_points(group="console_scripts") if ep.name == SCRIPT]
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    for line in parser.get("options.entry_points", "console_scripts", fallback="").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == SCRIPT:
            values.append(value.strip())
    for value in values:
        module, _, attribute = value.partition(":")
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return module, attribute
    raise SystemExit(f"no importable '{SCRIPT}' console script (looked in the installed metadata "
                     f"and setup.cfg); run `make setup` first.")


def find_command() -> Tuple[click.Command, Dict[str, Any]]:
    """The click command the console script runs, and the keyword arguments it passes to its
    ``main()`` (``auto_envvar_prefix``, ``prog_name``). The entry point is called with
    ``click.Command.main`` replaced by a catcher, so nothing of the launch runs."""
    module, attribute = _entry_point_value()
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    original = click.Command.main

    def catch(self: click.Command, *args: Any, **kwargs: Any) -> None:
        raise _Found(self, kwargs)

    saved_argv = sys.argv
    click.Command.main = catch  # type: ignore[method-assign]
    sys.argv = [SCRIPT, "--help"]
    try:
        target()
    except _Found as found:
        return found.command, found.kwargs
    finally:
        click.Command.main = original  # type: ignore[method-assign]
        sys.argv = saved_argv
    raise SystemExit(f"the '{SCRIPT}' entry point {module}:{attribute} never called a click "
                     f"command's main().")


def _cell(text: str) -> str:
    """Plain text for one line of Markdown (a table cell): ``<`` would open an HTML tag."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _envvar(param: click.Parameter, prefix: Optional[str]) -> str:
    if not getattr(param, "show_envvar", False):
        return ""  # as --help: only where the command advertises it
    if param.envvar:
        names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
        return ", ".join(_code(name) for name in names)
    if isinstance(param, click.Option) and param.allow_from_autoenv and prefix and param.name:
        return _code(f"{prefix}_{param.name.upper()}")
    return ""


def _type(param: click.Option) -> str:
    if param.is_flag and not param.count:
        return "on/off" if param.secondary_opts else "flag"
    if param.count:
        return "count"
    kind = param.type
    if isinstance(kind, click.Choice):
        text = " \\| ".join(_code(str(choice)) for choice in kind.choices)
    elif isinstance(kind, (click.IntRange, click.FloatRange)):
        base = "integer" if isinstance(kind, click.IntRange) else "float"
        low = "" if kind.min is None else f"{kind.min}{'<' if kind.min_open else '<='}"
        high = "" if kind.max is None else f"{'<' if kind.max_open else '<='}{kind.max}"
        text = f"{base} ({low}x{high})"
    elif param.metavar:
        text = _code(param.metavar)
    else:
        text = kind.name
    if param.nargs > 1 and not param.metavar:
        text += f" x {param.nargs}"
    if param.multiple:
        text += ", repeatable"
    return text


def _default(param: click.Option, ctx: click.Context) -> str:
    """Click's own default, or the one the help text states in ``[default: ...]``."""
    help_text = param.help or ""
    start = help_text.find("[default: ")
    if start >= 0:
        return _cell(help_text[start + len("[default: "):help_text.index("]", start)])
    value = param.get_default(ctx, call=False)
    if param.is_flag and not param.count:
        if not param.secondary_opts:
            return ""
        return _code(param.opts[0] if value else param.secondary_opts[0])
    if value is None or value in ((), [], "") or type(value).__name__ == "Sentinel":
        return ""  # no default (click 8.3+ says so with its UNSET sentinel)
    if isinstance(value, (list, tuple)):
        return _code(" ".join(str(v) for v in value))
    return _code(str(value))


def _help(param: click.Option) -> str:
    text = param.help or ""
    start = text.find("[default: ")
    if start >= 0:
        text = text[:start] + text[text.index("]", start) + 1:]
    return re.sub(r" \.(\s|$)", r".\1", _cell(text))


def _names(param: click.Option) -> str:
    names = list(param.opts)
    if param.secondary_opts:
        names += param.secondary_opts
    return ", ".join(_code(name) for name in names)


def render(command: click.Command, kwargs: Dict[str, Any]) -> str:
    prog = kwargs.get("prog_name") or SCRIPT
    # main(auto_envvar_prefix=...) as the entry point calls it, else the command's own setting
    prefix = (kwargs.get("auto_envvar_prefix")
              or (command.context_settings or {}).get("auto_envvar_prefix"))
    ctx = click.Context(command, info_name=prog, auto_envvar_prefix=prefix)
    options = [p for p in command.params if isinstance(p, click.Option)]
    shown = [p for p in options if not p.hidden]
    hidden = [p for p in options if p.hidden]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines: List[str] = [
        f"# `{prog}` option reference",
        "",
        "<!-- Generated by scripts/gen_cli_reference.py from the command itself: do not edit. "
        f"Regenerate with `{REGENERATE}`. -->",
        "",
        "[Guide index](README.md) · the options explained by topic: [the launcher](launcher.md)",
        "",
        "<!-- illustrative -->",
        "```sh",
        f"{prog} {usage}",
        "```",
        "",
    ]
    if command.help:
        lines += [_cell(paragraph) + "\n" for paragraph in command.help.split("\n\n")]
    lines += [
        f"Arguments: {', '.join(_code(a.human_readable_name) for a in arguments)}. Options "
        f"stop at the first argument: everything after `PROGRAM` is the program's.",
        "",
        "## Options",
        "",
        "| option | type | default | environment | meaning |",
        "|---|---|---|---|---|",
    ]
    for param in shown:
        lines.append(f"| {_names(param)} | {_type(param)} | {_default(param, ctx)} | "
                     f"{_envvar(param, prefix)} | {_help(param)} |")
    if hidden:
        lines += [
            "",
            "## Accepted with no effect",
            "",
            "PopRun's options for IPU hardware: accepted so that PopRun's commands run, with one "
            "line on stderr saying they have no effect here (hidden from `--help`).",
            "",
            "| option | type |",
            "|---|---|",
        ]
        for param in hidden:
            lines.append(f"| {_names(param)} | {_type(param)} |")
    if command.epilog:
        lines += ["", "## Notes", ""]
        lines += [_cell(paragraph) + "\n" for paragraph in command.epilog.split("\n\n")]
    return "\n".join(lines).rstrip("\n") + "\n"


def generate() -> str:
    command, kwargs = find_command()
    return render(command, kwargs)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare only: exit 1 when docs/cli-reference.md differs")
    parser.add_argument("--out", default=OUT, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    text = generate()
    current = open(args.out, encoding="utf-8").read() if os.path.exists(args.out) else None
    if args.check:
        if current != text:
            print(f"{os.path.relpath(args.out, ROOT)} is out of date; run `{REGENERATE}`.",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
