"""The command line every training wing shares: `python -m training.sft|grpo|dpo` (`rumik train sft|grpo|dpo`).

    python -m training.sft  --config C.toml [--set KEY=VALUE ...] [--out OUT] [--resume]
    python -m training.grpo --smoke --out /tmp/grpo-smoke
    main("training.dpo", ["--smoke", "--out", "/tmp/dpo-smoke"])     # what training/dpo/__main__.py runs

`--config FILE` or `--smoke`, `--set KEY=VALUE` (repeatable), `--out OUT`, `--resume`; what a
run does with them (resume policy, smoke verdict, exit statuses) is `training.trainer.train_command`.
`WINGS` names each wing's trainer class and what its `--smoke` runs.

Parsing imports no torch, so `--help` and a usage error come at once: the help's text is the
trainer module's docstring, read from its source, and the trainer module (torch, the model)
is imported only once the flags parse.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from training.dpo.config import SMOKE_CONFIG as DPO_SMOKE_CONFIG
from training.grpo.config import SMOKE_CONFIG as GRPO_SMOKE_CONFIG


@dataclass(frozen=True)
class Wing:
    """A wing's command: `python -m NAME` trains NAME.trainer's `trainer` class; `smoke_help`
    says what `--smoke` runs."""

    trainer: str
    smoke_help: str


WINGS = {
    "training.sft": Wing("SFTTrainer", "CPU end-to-end check: espeak-ng speech, tiny model, prepare, train "
                                       "(OUT default runs/sft-smoke)"),
    "training.grpo": Wing("GRPOTrainer", f"tiny model on CPU with the synthetic codebook-0 reward "
                                         f"({GRPO_SMOKE_CONFIG.name})"),
    "training.dpo": Wing("DPOTrainer", f"tiny model on CPU with GRPO's synthetic codebook-0 reward "
                                       f"({DPO_SMOKE_CONFIG.name})"),
}


def module_doc(module: str) -> str:
    """`module.__doc__` without importing the module (a trainer module imports torch): read from its source."""
    source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse(source), clean=False) or ""


def build_parser(name: str) -> argparse.ArgumentParser:
    """The flags of `python -m NAME` (a key of WINGS); the description is NAME.trainer's docstring."""
    parser = argparse.ArgumentParser(prog=f"rumik train {name.split('.')[-1]}",
                                     description=module_doc(f"{name}.trainer"),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON or TOML config (see training/configs/)")
    parser.add_argument("--smoke", action="store_true", help=WINGS[name].smoke_help)
    parser.add_argument("--out", help="output folder OUT (overrides out_dir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set optim.lr=3e-5 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue OUT's run even though its settings differ from this config "
                             "(a rerun with the same settings resumes without it)")
    return parser


def parse_args(name: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`python -m NAME`'s arguments; a usage error (neither or both of --config and --smoke) exits with status 2."""
    parser = build_parser(name)
    args = parser.parse_args(argv)
    if bool(args.config) == bool(args.smoke):
        parser.error("pass --config CONFIG, or --smoke")
    return args


def main(name: str, argv: Sequence[str] | None = None) -> Path:
    """`python -m NAME ARGV`: parse (no torch), then import NAME.trainer and train; returns OUT."""
    args = parse_args(name, argv)
    from training.trainer import train_command

    trainer_class = getattr(importlib.import_module(f"{name}.trainer"), WINGS[name].trainer)
    return train_command(trainer_class, args)
