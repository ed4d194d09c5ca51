"""`python -m training.voice` (`rumik voice`): training.voice.cli's command line. Its flags parse
before torch is imported, so `--help` is instant."""

from __future__ import annotations

from training.voice.cli import main

if __name__ == "__main__":
    main()
