"""What a voice adaptation tells whoever runs it: each step as it starts and ends, training step by step, and
a way to cancel it.

    progress = Progress(on_event=print, cancel=threading.Event())
    create_voice(..., progress=progress)      # events: {"step": "data", "status": "started", "index": 0, ...}
    progress.cancel.set()                     # the run stops at its next check with Cancelled

STEPS, in order: data (decode, cut and filter the recordings), consent (its checks), load (the
model), encode (the clips through Mimi), replay (the built-in voices speaking), train, evaluate,
package. Each gives a "started" and a "done" event (with figures: clips kept and dropped with
reasons, held-out losses, the package's path); training also gives a "running" event per step
with its loss, the held-out loss when measured and an estimate of the seconds left. A step a
resumed run skips gives "done" with `"resumed": true`. Events are plain JSON-able dicts, so a job
store, a server's SSE stream and the CLI can all take them as they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rumik_app.errors import RumikError
from rumik_app.voices.makers import STEPS  # the maker contract's list, which the app shows too


class Cancelled(RumikError, RuntimeError):
    """The adaptation was cancelled (Progress.cancel was set); nothing was written to the library."""


class Progress:
    """Events to `on_event` (none: dropped) and the cancel flag every step checks."""

    def __init__(self, on_event: Callable[[dict], None] | None = None, cancel: threading.Event | None = None):
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self._train_start: tuple[float, int] | None = None

    def emit(self, event: dict) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def check(self) -> None:
        """Cancelled if the cancel flag is set (called between steps and between training steps)."""
        if self.cancel.is_set():
            raise Cancelled("The voice adaptation was cancelled; nothing was added to the library.")

    def started(self, step: str, **details) -> None:
        self.check()
        self.emit({"step": step, "status": "started", "index": STEPS.index(step), "of": len(STEPS), **details})

    def done(self, step: str, **details) -> None:
        self.emit({"step": step, "status": "done", "index": STEPS.index(step), "of": len(STEPS), **details})

    def training(self, step: int, total: int, metrics: dict) -> None:
        """One optimiser step's event (loss, held-out loss when measured, seconds left), then the cancel check."""
        now = time.monotonic()
        if self._train_start is None:
            self._train_start = (now, step - 1)
        began, first = self._train_start
        per_step = (now - began) / max(step - first, 1)
        event = {"step": "train", "status": "running", "train_step": step, "train_steps": total,
                 "loss": round(metrics["loss"], 5), "seconds_left": round(per_step * (total - step), 1)}
        if "heldout_loss" in metrics:
            event["heldout_loss"] = round(metrics["heldout_loss"], 5)
        self.emit(event)
        self.check()
