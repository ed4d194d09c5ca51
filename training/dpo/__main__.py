"""`python -m training.dpo` (`rumik train dpo`): training.dpo.trainer's command line. Its flags
(training.cli) parse before torch is imported, so `--help` is instant."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from training import cli


def main(argv: Sequence[str] | None = None) -> Path:
    """Parse ARGV, then import the trainer and train; returns OUT."""
    return cli.main("training.dpo", argv)


if __name__ == "__main__":
    main()
