"""The project's errors: one base class, and how a command line reports them.

    from rumik_app.errors import RumikError, user_errors
    try:
        engine = TTSEngine.from_pretrained(path)
    except RumikError as exc:          # any error a user can fix: str(exc) names the fix
        print(exc)

    def main(argv=None):
        args = parser.parse_args(argv)
        with user_errors():            # a RumikError -> one `error: ...` line on stderr, exit status 2
            run(args)

Every error the project raises for bad input (a missing checkpoint, an unknown tag, a bad
config key, an unreadable clip, ...) derives from `RumikError`; its message is one sentence
that says what is wrong and how to fix it. The classes here belong to `rumik_app`; the other
packages define theirs on top of `RumikError` (evaluation's `SynthesisError`, `ASRError`,
`AudioLoadError`, `PromptFileError`; training's `DataError`, `PrepareError`; the app's
`UserError`, ...). Classes that used to be `ValueError`s or `RuntimeError`s still are (multiple
inheritance), so existing `except ValueError` code keeps working.

Exit status 2 (argparse's status for a usage error) means "the user's input was wrong" in
every command line of the project; 1 is left to crashes (a traceback, a bug).

Torch-free and import-light: the request module and the CLIs import it before any model.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

EXIT_USER_ERROR = 2


class RumikError(Exception):
    """Base of every error the user can fix; the message says what is wrong and how to fix it."""


class CheckpointError(RumikError, RuntimeError):
    """A checkpoint could not be found or loaded; the message says how to fix it."""


class CheckpointConfigError(CheckpointError, ValueError):
    """A checkpoint's config.json is missing a field or is inconsistent."""


class PromptError(RumikError, ValueError):
    """User input that cannot become a request or a prompt; the message says how to fix it.

    field: the request field at fault ("temperature", "voice", ...), when one is; the speech
    server reports it as OpenAI's `param`."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ConfigError(RumikError, ValueError):
    """A run config (file, key or `--set` override) is invalid; the message names the key and the fix."""


def report_user_error(exc: BaseException) -> int:
    """Print `error: <message>` on stderr; returns EXIT_USER_ERROR (for `main() -> int` CLIs)."""
    print(f"error: {exc}", file=sys.stderr, flush=True)
    return EXIT_USER_ERROR


@contextlib.contextmanager
def user_errors(*also: type[BaseException]) -> Iterator[None]:
    """CLI guard: a RumikError (or one of `also`, e.g. OSError) becomes one `error: ...` line on
    stderr and `SystemExit(2)`, never a traceback. Anything else (a bug) propagates unchanged."""
    try:
        yield
    except (RumikError, *also) as exc:
        raise SystemExit(report_user_error(exc)) from None


__all__ = [
    "RumikError", "CheckpointError", "CheckpointConfigError", "PromptError", "ConfigError",
    "EXIT_USER_ERROR", "report_user_error", "user_errors",
]
