"""`python -m rumik_app.normalize "TEXT"`: the public command path of `rumik_app.text.normalize`.

    python -m rumik_app.normalize "₹2,50,000 15/08/2026 को 10:30 am" [--language hi]
    python -m rumik_app.normalize --coverage        # what is read in which language (markdown)

Only the command line lives here (a stable path for scripts and docs); the normaliser is
`rumik_app.text.normalize` (`from rumik_app.text import normalize_text`).
"""

from __future__ import annotations

import sys

from rumik_app.text.normalize import main

if __name__ == "__main__":
    sys.exit(main())
