"""Launch presets: read a TOML or YAML file of option values, and write the effective options back.

Keys are the long option names (``num-instances`` or ``num_instances``); the command line and
POPRUN_* variables override them.
"""
from __future__ import annotations

import os
import math
from typing import Any, Dict, Mapping

# popdist_launcher/configs: three folders up from launcher/cli/config_file.py
CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")
SUFFIXES = (".toml", ".yaml", ".yml")


class ConfigFileError(ValueError):
    """The file is missing, unreadable, or has keys that are not options or values of the wrong
    type."""


# What each kind of option takes in a file: a check, and how the message names it.
KINDS = {
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number", "4"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v), "a finite number", "30.0"),
    "boolean": (lambda v: isinstance(v, bool), "true or false", "true"),
    "string": (lambda v: isinstance(v, str), "a string in quotes", '"VALUE"'),
    "pair": (lambda v: isinstance(v, list) and len(v) == 2 and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v), "a list of two whole numbers",
        "[10, 100]"),
    "strings": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                "a list of strings", '["A=1", "B"]'),
    "instances": (lambda v: _is_index(v) or isinstance(v, str)
                  or isinstance(v, list) and bool(v) and all(_is_index(x) for x in v),
                  "an instance index or a list of them", "[0, 1]"),
}


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def find(name: str) -> str:
    """The file as given, else under ./configs or the project's configs/, with or without suffix."""
    candidates = [name]
    for folder in ("configs", CONFIG_DIR):
        candidates.append(os.path.join(folder, name))
        candidates.extend(os.path.join(folder, name + s) for s in SUFFIXES)
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ConfigFileError(
        f"config file {name!r} not found (looked for it as given and under configs/); pass the "
        f"path of a .toml or .yaml file."
    )


def load(name: str, kinds: Mapping[str, str]) -> Dict[str, Any]:
    """Option values from a config file, keyed by parameter name (underscores); ``kinds`` maps
    each option's parameter name to the kind of value it takes (a key of KINDS)."""
    path = find(name)
    try:
        if path.endswith(".toml"):
            import tomllib
            with open(path, "rb") as f:
                data = tomllib.load(f)
        elif path.endswith((".yaml", ".yml")):
            import yaml
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        else:
            raise ConfigFileError(
                f"config file {path!r} has an unknown format; use a .toml, .yaml or .yml file.")
    except ConfigFileError:
        raise
    except UnicodeDecodeError:
        raise ConfigFileError(f"config file {path!r} is not a text file; give a TOML or YAML "
                              f"file of option = value lines.") from None
    except Exception as exc:  # the parsers' own errors name line and column: kept on one line
        raise ConfigFileError(f"config file {path!r} could not be parsed: "
                              f"{' '.join(str(exc).split())}.") from None
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"config file {path!r} must hold a table of option = value pairs, got "
            f"{type(data).__name__}.")
    known = sorted(kinds)
    values: Dict[str, Any] = {}
    for key, value in data.items():
        name_ = str(key).replace("-", "_")
        if name_ not in known:
            raise ConfigFileError(
                f"config file {path!r} has unknown key {key!r}; expected option names such as "
                f"{', '.join(k.replace('_', '-') for k in known)}."
            )
        accepts, expected, example = KINDS[kinds[name_]]
        if not accepts(value):
            shown = name_.replace("_", "-")
            raise ConfigFileError(
                f"config file {path!r}: {key} = {value!r} is not {expected}; write it as e.g. "
                f"{shown} = {example}.")
        if kinds[name_] == "instances" and not isinstance(value, str):
            value = ",".join(str(v) for v in (value if isinstance(value, list) else [value]))
        values[name_] = value
    return values


def dump(path: str, values: Mapping[str, Any], overwrite: bool = True) -> None:
    """Write option values (None left out) as TOML, or YAML for .yaml/.yml; atomically. An
    existing file is replaced only with ``overwrite`` (PopRun's --overwrite-config)."""
    if not overwrite and os.path.lexists(path):
        raise ConfigFileError(f"--export-config {path!r} already exists; pass --overwrite-config "
                              f"to replace it, or give another FILE.")
    items = {k.replace("_", "-"): v for k, v in values.items() if v is not None}
    if path.endswith((".yaml", ".yml")):
        import yaml
        text = yaml.safe_dump({k: list(v) if isinstance(v, tuple) else v for k, v in items.items()},
                              sort_keys=False)
    else:
        import tomli_w  # only when exporting: it escapes newlines, quotes and control characters
        text = tomli_w.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in items.items()})
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write("# poprun-lite options; pass back with --config\n" + text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConfigFileError(f"cannot write the options to {path!r} ({exc.strerror}); give "
                              f"--export-config a FILE in a folder you can write to.") from None
