"""Phased online DPO: GRPO's rollouts, DPO updates.

`python -m training.dpo` (`rumik train dpo`): training.dpo.trainer's command line. Its flags
(training.cli) parse before torch is imported, so `--help` is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from training import cli
from training.dpo.config import SMOKE_CONFIG

WING = cli.Wing("dpo", "training.dpo.trainer",
                f"tiny model on CPU with GRPO's synthetic codebook-0 reward ({SMOKE_CONFIG.name})")


def trainer_class() -> type:
    """DPOTrainer, imported once the flags have parsed (it imports torch)."""
    from training.dpo.trainer import DPOTrainer

    return DPOTrainer


def main(argv: Sequence[str] | None = None) -> Path:
    """Parse ARGV, then import the trainer and train; returns OUT."""
    return cli.main(WING, argv, trainer_class)


if __name__ == "__main__":
    main()
