"""The docs stay true: README.md and docs/*.md link only to what exists, name only options the
command has, run every shell block not marked illustrative, and the generated option reference
matches the command (docs/contributing.md, 'Documentation', says how to keep them so)."""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 300
ILLUSTRATIVE = "<!-- illustrative -->"
SHELL = {"sh", "bash", "shell", "console"}
# Options the pages name alone in backticks that belong to another tool, with that tool. A page
# naming a new one adds it here; a poprun-lite option must never be listed.
OTHER_TOOLS_OPTIONS = {
    "--allow-run-as-root": "mpirun", "--cpu-bind": "srun", "--no-deps": "pip",
    "--no-build-isolation": "pip",
    "--gloo": "horovodrun", "-I": "python", "-F": "ssh", "--check": "gen_cli_reference.py",
    "--host-call": "the tests' estimator program", "--model-type": "Graphcore's Keras example",
    "--repeats": "benchmarks", "--baseline": "benchmarks", "--np": "benchmarks",
    "--onednn": "benchmarks", "--path": "benchmarks", "--program": "benchmarks",
    "-learning_rate": "arithmetic: minus the learning rate",
    "--use-synthetic-data": "Graphcore's applications", "--dist": "pytest-xdist",
    "--no-loadscope-reorder": "pytest-xdist",
    **dict.fromkeys(("--wheel-cache", "--rebuild", "--gpu-operations", "--no-mpi"),
                    "python -m popdist_launcher.install horovod"),
}


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def _command() -> click.Command:
    return _load_generator().find_command()[0]


@lru_cache(maxsize=1)
def _option_nargs() -> Dict[str, int]:
    """Every spelling of every option of poprun-lite (hidden ones included) -> values it takes."""
    table: Dict[str, int] = {}
    for param in _command().params:
        if isinstance(param, click.Option):
            takes = 0 if (param.is_flag or param.count) else param.nargs
            for name in [*param.opts, *param.secondary_opts]:
                table[name] = takes
    table["--help"] = table["-h"] = 0
    return table


# ---------------------------------------------------------------------------------------------
# Reading Markdown: fenced blocks, inline code, links, headings.

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


class Block:
    def __init__(self, page: Path, line: int, language: str, text: str, marked: bool) -> None:
        self.page, self.line, self.language, self.text, self.marked = (
            page, line, language, text, marked)

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _split(page: Path) -> Tuple[List[Tuple[int, str]], List[Block]]:
    """A page's prose lines (number, text) and its fenced blocks."""
    prose: List[Tuple[int, str]] = []
    blocks: List[Block] = []
    lines = page.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, language, start = match.group(2), match.group(3).lower(), i
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body: List[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        blocks.append(Block(page, start + 1, language, "\n".join(body), previous == ILLUSTRATIVE))
    return prose, blocks


INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def _inline_code(text: str) -> List[str]:
    return [match.group(2).strip() for match in INLINE_CODE.finditer(text)]


def _links(page: Path) -> Iterator[Tuple[int, str]]:
    prose, _ = _split(page)
    for number, text in prose:
        for match in LINK.finditer(INLINE_CODE.sub("", text)):
            yield number, match.group(2)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text (Markdown dropped) in lower case, characters other
    than letters, digits, spaces, '-' and '_' removed, spaces turned into '-'."""
    text = LINK.sub(lambda m: m.group(1), heading)
    text = INLINE_CODE.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(page: Path) -> Set[str]:
    found: Set[str] = set()
    seen: Dict[str, int] = {}
    prose, _ = _split(page)
    for _, text in prose:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", text)
        if not match:
            continue
        slug = github_anchor(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


# ---------------------------------------------------------------------------------------------
# Options named in the pages.

def _words(command: str) -> List[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in an excerpt such as `poprun-lite ... 'exec`
        return command.split()


def _launcher_options(words: List[str]) -> Iterator[str]:
    """The options of every poprun-lite command among ``words``, up to its PROGRAM."""
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        is_launcher = os.path.basename(word) == "poprun-lite" or (
            word == "-m" and i < len(words) and words[i] == "popdist_launcher")
        if not is_launcher:
            continue
        if word == "-m":
            i += 1
        yield from _options_until_program(words[i:])


def _options_until_program(words: List[str]) -> Iterator[str]:
    nargs = _option_nargs()
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("|", "&&", ";", "/") or not re.match(r"--?[A-Za-z]", word):
            if word == "/":  # `--tag-output / --no-tag-output`
                i += 1
                continue
            return  # PROGRAM (or a placeholder such as ...): the rest is the program's
        name = re.match(r"--?[A-Za-z][\w-]*", word).group(0)  # `--output-dir/x.log`: the option
        if re.fullmatch(r"--[A-Z_]+", name):  # a placeholder: `--OPTION=yes|no`
            i += 1
            continue
        yield name
        i += 1 if "=" in word else 1 + nargs.get(name, 0)


def _mentions(page: Path) -> Iterator[Tuple[int, str, bool]]:
    """(line, option, alone) for every option the page names: in poprun-lite commands (shell
    blocks and inline code), and alone in backticks (`--min-np 2`)."""
    prose, blocks = _split(page)
    for number, text in prose:
        for code in _inline_code(text):
            words = _words(code)
            for option in _launcher_options(words):
                yield number, option, False
            if words and words[0].startswith("-"):
                for option in _options_until_program(words):
                    yield number, option, True
    for block in blocks:
        if block.language in SHELL or block.language == "":
            for offset, line in enumerate(block.text.split("\n"), start=1):
                for option in _launcher_options(_words(line)):
                    yield block.line + offset, option, False


# ---------------------------------------------------------------------------------------------
# The tests.

def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page "
        f"under docs/ and link it from the README.")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for number, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no heading "
                          f"'#{anchor}' in {file.relative_to(ROOT)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_page_is_in_the_index():
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / target.partition("#")[0]).resolve()
              for _, target in _links(index) if target.partition("#")[0]}
    missing = [page.name for page in PAGES
               if page.parent == index.parent and page != index and page not in linked]
    assert not missing, f"docs/README.md (the guide's index) does not link {missing}"


def test_github_anchor_rules():
    assert github_anchor("1. `RunConfig(train_distribute=strategy)` with an `IPUEstimator`") == (
        "1-runconfigtrain_distributestrategy-with-an-ipuestimator")
    assert github_anchor("MPI's remote-shell agent") == "mpis-remote-shell-agent"
    assert github_anchor("[The launcher](launcher.md) and *its* options") == (
        "the-launcher-and-its-options")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_named_exists(page):
    known = _option_nargs()
    unknown = []
    for number, option, alone in _mentions(page):
        if option in known or (alone and option in OTHER_TOOLS_OPTIONS):
            continue
        hint = (" (if it belongs to another tool, add it to OTHER_TOOLS_OPTIONS in "
                "tests/test_docs.py with the tool's name)") if alone else ""
        unknown.append(f"{page.relative_to(ROOT)}:{number}: {option} is not a poprun-lite "
                       f"option{hint}")
    assert not unknown, "\n".join(unknown)


def test_the_install_commands_documented_options_exist():
    from popdist_launcher.install.__main__ import horovod
    documented = [o for o, tool in OTHER_TOOLS_OPTIONS.items()
                  if tool == "python -m popdist_launcher.install horovod"]
    spelled = {name for param in horovod.params for name in (*param.opts, *param.secondary_opts)}
    assert documented and set(documented) <= spelled


def test_other_tools_options_are_not_ours():
    ours = sorted(set(OTHER_TOOLS_OPTIONS) & set(_option_nargs()))
    assert not ours, f"{ours} are poprun-lite options: remove them from OTHER_TOOLS_OPTIONS"


def test_every_option_is_explained_in_the_guide():
    """Beside the generated reference, every option of --help is explained on a written page."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES
                     if page.name != "cli-reference.md")
    missing = [param.opts[-1] for param in _command().params
               if isinstance(param, click.Option) and not param.hidden
               and not any(re.search(re.escape(name) + r"(?![\w-])", text)
                           for name in param.opts)]
    assert not missing, (f"options no page of the guide explains: {missing}; add them to "
                         f"docs/launcher.md (or the page of their topic)")


def test_cli_reference_is_generated_from_the_command():
    generator = _load_generator()
    expected = generator.generate()
    current = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert current == expected, (
        "docs/cli-reference.md differs from what the poprun-lite command says (an option was "
        "added, removed or changed): run `python scripts/gen_cli_reference.py` and commit "
        "docs/cli-reference.md.")


def _shell_blocks() -> List[Block]:
    return [block for page in PAGES for block in _split(page)[1] if block.language in SHELL]


def test_every_shell_block_is_marked_or_runnable():
    """Blocks not marked illustrative must be runnable here: no placeholder program names."""
    unmarked = [b for b in _shell_blocks() if not b.marked]
    assert unmarked, "README.md shows at least one command that the test runs"
    for block in unmarked:
        assert "train.py" not in block.text, (
            f"{block.where()}: a block that names a program the reader supplies is illustrative:"
            f" put '{ILLUSTRATIVE}' on the line above its fence")


@pytest.mark.parametrize("block", [b for b in _shell_blocks() if not b.marked],
                         ids=lambda b: b.where())
def test_shell_block_runs(block):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    result = subprocess.run(["bash", "-e", "-c", block.text], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"{block.where()}: the block exited {result.returncode} (mark it '{ILLUSTRATIVE}' if "
        f"it cannot run here):\n{block.text}\nstdout:\n{result.stdout}\nstderr:\n"
        f"{result.stderr}")


def test_no_absolute_paths_of_a_machine():
    found = [f"{page.relative_to(ROOT)}:{number}"
             for page in PAGES
             for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1)
             if re.search(r"(?<![\w.])/(work|root|home/\w+)/", line)]
    assert not found, f"absolute paths of a machine in the docs: {found}"


TIMING_CLAIM = re.compile(r"\b(?:in|about|takes?|took|within)\s+(?:about\s+)?\d+(?:\.\d+)?\s?"
                          r"(?:s|ms|seconds)\b")
TIMING_SOURCE = re.compile(r"benchmarks?/|benchmark|measured|seen|\.py\b", re.I)


def test_timing_claims_name_their_source():
    """A paragraph that says how long something takes ("in about 0.1 s") names where the number
    comes from: a benchmark run (benchmarks/...), a test, or how it was measured."""
    unsourced = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name == "cli-reference.md":
            continue
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if paragraph.lstrip().startswith(("```", "|")):
                continue
            claim = TIMING_CLAIM.search(paragraph)
            if claim and not TIMING_SOURCE.search(paragraph):
                unsourced.append(f"{path.name}: {claim.group(0)!r} in {paragraph[:80]!r}...")
    assert unsourced == []
