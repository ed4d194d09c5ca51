"""`python -m training.prepare` (= `rumik prepare`): see training.prepare."""

from training.prepare.cli import main

if __name__ == "__main__":
    main()
