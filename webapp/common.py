"""Small pieces every tab of `app.py` shares: app limits, error mapping, clip files.

Library module (no command line). `user_errors()` turns the project's own exceptions into
one readable `gr.Error` and any other exception into a short message (the traceback goes to
the server log, never to the visitor).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rumik_app.audio import SAMPLE_RATE, write_wav
from rumik_app.checkpoint import CheckpointError
from rumik_app.prompt import PromptError
from webapp.systems import SystemUnavailable

log = logging.getLogger(__name__)

# Longest text the app accepts in one request. The engine takes up to 50,000 characters
# (chunked), but a shared demo should not be tied up for minutes by one visitor.
APP_MAX_TEXT_CHARS = 2_000
MAX_SECONDS_LIMIT = 30.0  # the engine caps an utterance (chunk) at ~30 s
DEFAULT_MAX_SECONDS = 20.0
MIN_SECONDS = 0.5  # slider floor (the engine rounds up to whole 80 ms frames)
MAX_KEPT_CLIPS = 500  # synthesised clips kept in the temp folder before the oldest go
# Generations running at once (one engine per system, each locked; a GPU does one at a time).
SYNTH_CONCURRENCY = 1


class UserError(ValueError):
    """Bad input from a visitor; the message says how to fix it."""


USER_ERRORS = (UserError, PromptError, SystemUnavailable, CheckpointError)


def _known_errors() -> tuple[type[BaseException], ...]:
    """USER_ERRORS plus the evaluation package's errors that carry a fix in their message."""
    known = list(USER_ERRORS)
    with contextlib.suppress(ImportError):
        from evaluation.systems.base import SynthesisError

        known.append(SynthesisError)
    return tuple(known)


@contextlib.contextmanager
def user_errors(action: str) -> Iterator[None]:
    """Re-raise known errors as `gr.Error(message)`, unknown ones as a one-line `gr.Error`."""
    import gradio as gr

    try:
        yield
    except gr.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - a visitor never sees a traceback
        if isinstance(exc, _known_errors()):
            raise gr.Error(str(exc), print_exception=False) from None
        log.exception("%s failed", action)
        raise gr.Error(
            f"{action} failed ({type(exc).__name__}: {exc}). If this keeps happening, report it with the server log.",
            print_exception=False,
        ) from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    return sha256_bytes(Path(path).read_bytes())


class ClipFolder:
    """Synthesised WAVs for visitors to play and download, pruned to the newest `keep`."""

    def __init__(self, root: str | os.PathLike | None = None, keep: int = MAX_KEPT_CLIPS):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="rumik-app-clips-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self._lock = threading.Lock()

    def write(self, samples: np.ndarray, stem: str = "rumik", sample_rate: int = SAMPLE_RATE) -> Path:
        """Write a 16-bit WAV (atomically) and return its path."""
        path = write_wav(self.root / f"{stem}-{uuid.uuid4().hex[:10]}.wav", samples, sample_rate)
        self._prune()
        return path

    def _prune(self) -> None:
        with self._lock:
            files = sorted(self.root.glob("*.wav"), key=lambda p: p.stat().st_mtime)
            for old in files[: max(0, len(files) - self.keep)]:
                with contextlib.suppress(OSError):
                    old.unlink()
