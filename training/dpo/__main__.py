"""`python -m training.dpo`: see training.dpo.trainer (and training.trainer for the flags)."""

from training.dpo.trainer import main

main()
