"""Supervised fine-tuning or continued pre-training.

`python -m training.sft` (`rumik train sft`): training.sft.trainer's command line. Its flags
(training.cli) parse before torch is imported, so `--help` is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from training import cli

WING = cli.Wing("sft", "training.sft.trainer", "CPU end-to-end check: espeak-ng speech, tiny model, prepare, train "
                                               "(OUT default runs/sft-smoke)")


def trainer_class() -> type:
    """SFTTrainer, imported once the flags have parsed (it imports torch)."""
    from training.sft.trainer import SFTTrainer

    return SFTTrainer


def main(argv: Sequence[str] | None = None) -> Path:
    """Parse ARGV, then import the trainer and train; returns OUT."""
    return cli.main(WING, argv, trainer_class)


if __name__ == "__main__":
    main()
