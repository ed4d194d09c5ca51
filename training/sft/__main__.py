"""`python -m training.sft`: see training.sft.trainer (and training.trainer for the flags)."""

from training.sft.trainer import main

main()
