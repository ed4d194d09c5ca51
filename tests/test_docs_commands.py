"""Docs that run: every `rumik` command in a marked fenced block of README.md and docs/*.md.

    <!-- docs-test: run -->     each command runs (tiny checkpoint or no model), exit status 0
    <!-- docs-test: help -->    each command's flags exist in `rumik SUBCOMMAND --help` (real weights, a GPU,
                                or a server that never exits)

The marker sits on the line before a ```bash block. In a marked block every line (backslash
continuations joined, `#` comments dropped) is a `rumik ...` command, optionally after VAR=value
assignments; anything else fails, so no command hides from the check. A renamed flag fails here
instead of misleading a reader. Each command is its own process, forked from a warm one
(tests/warm_process.py), so the suite does not import torch again for each.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from rumik_app.cli import find_command
from tests.warm_process import run_rumik

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- docs-test: (run|help) -->\s*\n```(?:bash|sh|console)\n(.*?)^```", re.M | re.S)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class DocCommand:
    """One command of a marked block: where it is written, how it is checked, its words."""

    where: str  # "README.md:42"
    mode: str  # "run" or "help"
    env: tuple[tuple[str, str], ...]
    words: tuple[str, ...]  # after "rumik"


def block_commands(block: str) -> list[str]:
    """The commands of a fenced block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]


def parse_command(line: str, where: str, mode: str) -> DocCommand:
    """A DocCommand from one command line; ValueError when it is not `[VAR=value ...] rumik ...`."""
    words = shlex.split(line)
    env = []
    while words and ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env.append((name, value))
    if not words or words[0] != "rumik" or any(word in ("|", "&&", ";", ">", "<") for word in words):
        raise ValueError(f"{where}: a marked block holds only `rumik ...` commands, not: {line}")
    return DocCommand(where, mode, tuple(env), tuple(words[1:]))


def doc_commands(text: str, name: str) -> list[DocCommand]:
    """Every command of every marked block in one Markdown file."""
    found = []
    for match in MARKER.finditer(text):
        line_number = text.count("\n", 0, match.start()) + 2
        for line in block_commands(match.group(2)):
            found.append(parse_command(line, f"{name}:{line_number}", match.group(1)))
    return found


def all_doc_commands() -> list[DocCommand]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [command for path in files for command in doc_commands(path.read_text(encoding="utf-8"),
                                                                   str(path.relative_to(ROOT)))]


@functools.cache
def help_text(subcommand: tuple[str, ...]) -> str:
    proc = run_rumik([*subcommand, "--help"], cwd=ROOT, timeout_s=120)
    if proc.returncode != 0:
        raise AssertionError(f"rumik {' '.join(subcommand)} --help failed: {proc.stderr[-1000:]}")
    return proc.stdout


def unknown_flags(command: DocCommand) -> list[str]:
    """The command's `--flags` that its subcommand's --help does not name."""
    found = find_command(list(command.words))
    if found is None:
        return [f"(no rumik subcommand {' '.join(command.words[:2])!r})"]
    name, args = found
    leading = [word for word in args[: next((i for i, w in enumerate(args) if w.startswith("-")), len(args))]]
    text = help_text((*name.split(), *leading))
    flags = [word.split("=", 1)[0] for word in args if word.startswith("--")]
    return [flag for flag in flags if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)]


COMMANDS = all_doc_commands()


def test_the_readme_marks_its_commands():
    readme = [command for command in COMMANDS if command.where.startswith("README.md")]
    assert {command.mode for command in readme} == {"run", "help"}, "README.md: mark its tour's blocks"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.where} rumik {' '.join(c.words[:2])}")
def test_every_flag_of_a_documented_command_exists(command):
    assert unknown_flags(command) == [], f"{command.where}: rumik {' '.join(command.words)}"


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in COMMANDS if c.mode == "run"],
                         ids=lambda c: f"{c.where} rumik {' '.join(c.words[:2])}")
def test_a_runnable_command_runs(command, tmp_path):
    proc = run_rumik(command.words, cwd=tmp_path, env={"OMP_NUM_THREADS": "1", **dict(command.env)},
                     timeout_s=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{command.where}: rumik {' '.join(command.words)}\n{proc.stderr[-3000:]}"


def test_a_flag_that_does_not_exist_is_caught():
    markdown = "<!-- docs-test: help -->\n```bash\nrumik synthesize --model tiny --text hi --voise Ira \\\n" \
               "    --out x.wav   # a typo\n```\n"
    (command,) = doc_commands(markdown, "example.md")
    assert unknown_flags(command) == ["--voise"]


def test_a_marked_block_holds_only_rumik_commands():
    with pytest.raises(ValueError, match="only `rumik"):
        doc_commands("<!-- docs-test: run -->\n```bash\ncurl localhost:8000/health\n```\n", "example.md")
