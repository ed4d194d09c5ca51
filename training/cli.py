"""The command line every training wing shares: `python -m training.sft|grpo|dpo` (`rumik train sft|grpo|dpo`).

    python -m training.sft  --config C.toml [--set KEY=VALUE ...] [--out OUT] [--resume]
    python -m training.grpo --smoke --out /tmp/grpo-smoke
    main(WING, ["--smoke", "--out", "/tmp/dpo-smoke"], trainer_class)    # what training/dpo/__main__.py runs

`--config FILE` or `--smoke`, `--set KEY=VALUE` (repeatable), `--out OUT`, `--resume`; what a
run does with them (resume policy, smoke verdict, exit statuses) is `training.trainer.train_command`.
Each wing's `__main__` declares its `Wing` (its name, its trainer module, what `--smoke` runs) and
how to import its trainer class; this module imports no wing, so it sits below them
(docs/ARCHITECTURE.md §1, the layers of training).

Parsing imports no torch, so `--help` and a usage error come at once: the help's text is the
trainer module's docstring, read from its source, and the trainer module (torch, the model)
is imported only once the flags parse.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rumik_app.cli import module_doc

if TYPE_CHECKING:
    from training.trainer import Trainer


@dataclass(frozen=True)
class Wing:
    """A wing's command, `rumik train NAME`: `trainer` is the module whose docstring is the help
    (read, not imported: it imports torch); `smoke_help` says what `--smoke` runs."""

    name: str
    trainer: str
    smoke_help: str


def build_parser(wing: Wing) -> argparse.ArgumentParser:
    """The flags of `rumik train NAME`; the description is the trainer module's docstring."""
    parser = argparse.ArgumentParser(prog=f"rumik train {wing.name}", description=module_doc(wing.trainer),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON or TOML config (see training/configs/)")
    parser.add_argument("--smoke", action="store_true", help=wing.smoke_help)
    parser.add_argument("--out", help="output folder OUT (overrides out_dir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set optim.lr=3e-5 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue OUT's run even though its settings differ from this config "
                             "(a rerun with the same settings resumes without it)")
    return parser


def parse_args(wing: Wing, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The wing's arguments; a usage error (neither or both of --config and --smoke) exits with status 2."""
    parser = build_parser(wing)
    args = parser.parse_args(argv)
    if bool(args.config) == bool(args.smoke):
        parser.error("pass --config CONFIG, or --smoke")
    return args


def main(wing: Wing, argv: Sequence[str] | None, trainer_class: Callable[[], type[Trainer]]) -> Path:
    """`rumik train NAME ARGV`: parse (no torch), then `trainer_class()` imports the trainer; train,
    and return OUT."""
    args = parse_args(wing, argv)
    from training.trainer import train_command

    return train_command(trainer_class(), args)
