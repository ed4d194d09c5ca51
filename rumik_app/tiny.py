"""`python -m rumik_app.tiny OUT_DIR`: the public command path of `rumik_app.checkpoint.tiny`.

    python -m rumik_app.tiny /tmp/tiny                       # a random checkpoint in the published format
    python -m rumik_app.tiny /tmp/rw --preset real-width --layers 4

Only the command line lives here (a stable path for scripts and docs); the builder and its
options are `rumik_app.checkpoint.tiny`.
"""

from __future__ import annotations

from rumik_app.checkpoint.tiny import main

if __name__ == "__main__":
    main()
