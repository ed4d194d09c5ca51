"""`python -m training.grpo`: see training.grpo.trainer (and training.trainer for the flags)."""

from training.grpo.trainer import main

main()
