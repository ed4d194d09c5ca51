"""Process environment variables changed for a while, then put back as they were.

    with environment({"TORCH_COMPILE_DISABLE": "1", "RANK": None}):   # None: unset while inside
        start_processes()                                               # they inherit the change

For what a library reads from the environment at one moment (a child process's start, a server's
config), where it takes no argument instead. Not thread-safe: the environment is the process's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set each variable of `values` (None: unset it) while inside; on the way out every one of
    them is back to what it was, set or unset, whatever happened inside."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        _put(name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            _put(name, value)


def _put(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
