"""`rumik`: the one console command (pyproject's [project.scripts]); its subcommands are registered, not named.

    rumik --help                                   # the subcommands (imports none of them, nor torch)
    rumik synthesize --model tiny --text "नमस्ते" --out hello.wav
    rumik serve --model tiny --port 8000           # the speech server (OpenAI and Rumik APIs)
    rumik train sft --config training/configs/finetune_voice.toml --out runs/sft
    rumik campaign status --name pilot --data-dir outputs/app
    rumik watermark detect out/*.wav               # PerthNet watermark: watermarked or clean, and a score
    rumik align clip.wav --text "the words" --language en --out words.json   # word timestamps of any clip

A subcommand is an entry point of the `rumik_app.commands` group (pyproject.toml): its name is
the words a user types, joined by dots (`serve`; `train.sft` is `rumik train sft`: entry point names
keep to letters, digits, `_`, `.` and `-`), its value the function that runs it
(`rumik_app.serve.__main__:main`). So the core names no module of the packages above it, as
engine backends (`rumik_app.backends`) and aligners (`rumik_app.aligners`) are found, and a
package adds a command by registering one. `rumik NAME ARGS...` loads NAME's function and calls
it with ARGS unchanged, so its flags, help and exit status are the module's own, and
`python -m MODULE ARGS...` stays the same command. `rumik --help` imports none of them: a
command's line there is the first paragraph of its module's docstring, read from the source.
Every `--help` is light: no subcommand module imports torch before it has parsed its arguments
(tests/rumik_app/test_rumik_command.py).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import textwrap
from collections.abc import Mapping, Sequence
from importlib.machinery import PathFinder
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from rumik_app.errors import EXIT_USER_ERROR

PROG = "rumik"
COMMAND_GROUP = "rumik_app.commands"
HELP_WIDTH = 100  # columns of `rumik --help`; a long summary wraps under itself


def commands() -> dict[str, EntryPoint]:
    """Every registered subcommand by the words a user types (`train sft`), in alphabetical order
    (the installed package's metadata)."""
    return {entry.name.replace(".", " "): entry
            for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda entry: entry.name)}


def module_source(module: str) -> Path:
    """The source file of a dotted module name, found without importing it or its packages
    (a command's package may import torch); ModuleNotFoundError when there is none."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: finding it imports nothing
    for depth in range(1, len(rest) + 1):
        if spec is None or spec.submodule_search_locations is None:
            break
        spec = PathFinder.find_spec(".".join([top, *rest[:depth]]), spec.submodule_search_locations)
    if spec is None or not spec.has_location or not str(spec.origin).endswith(".py"):
        raise ModuleNotFoundError(f"No source file for {module}", name=module)
    return Path(spec.origin)


def module_doc(module: str) -> str:
    """`module.__doc__` (as written, not dedented), read from its source: nothing is imported."""
    tree = ast.parse(module_source(module).read_text(encoding="utf-8"))
    return ast.get_docstring(tree, clean=False) or ""


def summary(entry: EntryPoint) -> str:
    """A command's line in `rumik --help`: the first paragraph of its module's docstring, on one line."""
    try:
        doc = inspect.cleandoc(module_doc(entry.module))
    except ModuleNotFoundError:
        return f"(not installed: {entry.value} is missing; reinstall the project)"
    return " ".join(doc.split("\n\n")[0].split())


def usage(registered: Mapping[str, EntryPoint]) -> str:
    """`rumik --help`: every subcommand with its summary."""
    width = max(map(len, registered), default=0)
    lines = [f"usage: {PROG} COMMAND [ARGS...]   ({PROG} COMMAND --help for a command's flags)", "",
             "rumik-oss-1: expressive text-to-speech for 22 Indian languages and English.", "", "commands:"]
    for name, entry in registered.items():
        lines += textwrap.wrap(summary(entry), HELP_WIDTH, initial_indent=f"  {name:<{width}}  ",
                               subsequent_indent=" " * (width + 4)) or [f"  {name}"]
    return "\n".join(lines)


def find_command(argv: Sequence[str], names: Sequence[str] | None = None) -> tuple[str, list[str]] | None:
    """(subcommand name, its arguments) for `argv`, or None when it names none of `names`
    (default: the registered ones)."""
    names = list(commands()) if names is None else names
    for words in (2, 1):  # "train sft" before a one-word name
        name = " ".join(argv[:words])
        if len(argv) >= words and name in names:
            return name, list(argv[words:])
    return None


def unknown(argv: Sequence[str], names: Sequence[str]) -> str:
    """The message for a first word that names no command, with the second words it takes, if any."""
    second = [name.split()[1] for name in names if name.startswith(f"{argv[0]} ")]  # train: dpo, grpo, sft
    choices = ", ".join(second[:-1]) + " or " * (len(second) > 1) + second[-1] if second else ""
    hint = f" ({argv[0]} takes {choices})" if second else ""
    return f"{PROG}: unknown command {' '.join(argv[:2])!r}{hint}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run `rumik ARGV`; returns the exit status (0 when the subcommand returns a non-int result)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    registered = commands()
    if not registered:
        print(f"error: no {PROG} subcommands are registered (entry points {COMMAND_GROUP!r}): install the project "
              "with pip install -e . (or ./setup.sh).", file=sys.stderr)
        return EXIT_USER_ERROR
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(registered))
        return 0 if argv else EXIT_USER_ERROR
    found = find_command(argv, list(registered))
    if found is None:
        print(f"{unknown(argv, list(registered))}\n\n{usage(registered)}", file=sys.stderr)
        return EXIT_USER_ERROR
    name, args = found
    run = registered[name].load()
    sys.argv[0] = f"{PROG} {name}"  # argparse's default prog: "usage: rumik synthesize ..."
    result = run(args)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
