"""GRPO with per-codebook reward routing.

`python -m training.grpo` (`rumik train grpo`): training.grpo.trainer's command line. Its flags
(training.cli) parse before torch is imported, so `--help` is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from training import cli
from training.grpo.config import SMOKE_CONFIG

WING = cli.Wing("grpo", "training.grpo.trainer",
                f"tiny model on CPU with the synthetic codebook-0 reward ({SMOKE_CONFIG.name})")


def trainer_class() -> type:
    """GRPOTrainer, imported once the flags have parsed (it imports torch)."""
    from training.grpo.trainer import GRPOTrainer

    return GRPOTrainer


def main(argv: Sequence[str] | None = None) -> Path:
    """Parse ARGV, then import the trainer and train; returns OUT."""
    return cli.main(WING, argv, trainer_class)


if __name__ == "__main__":
    main()
