"""ZeroGPU (Hugging Face Spaces): GPU work runs inside `spaces.GPU`, and only on such a Space.

    zerogpu.import_spaces()                       # app.py, first: before torch starts CUDA
    stream = gpu_task(engine_stream, audio_seconds=lambda req, stats: budget(req))   # a GPU handler
    engine_options = zerogpu.engine_options(args.engine_options)   # device cuda, no compile, on a Space

A ZeroGPU Space has no GPU of its own: `spaces.GPU` attaches one for each call of a
decorated function, for at most `duration` seconds, charged to the visitor's daily quota.
ZeroGPU Spaces set SPACES_ZERO_GPU=true (what `spaces.config` reads); everywhere else
`on_zero_gpu()` is False, `gpu_task` returns the function unchanged and `spaces` is never
imported. On a Space:
  - `spaces` is imported before torch touches CUDA (it patches torch so that the model can
    be placed on "cuda" at start-up, the way ZeroGPU expects: the app preloads it then);
  - every GPU handler (synthesis, streaming and pair generation through
    `webapp.systems.LoadedSystem`, the Evaluate tab's ASR judges) is decorated once, when its
    system or judge is built, with a duration taken from the request's own budget: seconds
    of audio it may make (or hear) x GPU_SECONDS_PER_AUDIO_SECOND + a margin;
  - CUDA graphs are off (a compiled step cannot outlive the GPU's attachment);
  - a call refused for quota gets QUOTA_MESSAGE, which names what still works.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable

ZERO_GPU_ENV = "SPACES_ZERO_GPU"
# GPU seconds a second of audio costs on a ZeroGPU slice, with room to spare: the engine's
# real-time factor on an H200 is well under this, but no GPU has measured it for this code
# yet (RUMIK_ZEROGPU_RATE overrides it). The margin covers moving the weights onto the GPU.
RATE_ENV = "RUMIK_ZEROGPU_RATE"
GPU_SECONDS_PER_AUDIO_SECOND = 0.5
ASR_GPU_SECONDS_PER_AUDIO_SECOND = 0.2  # a Whisper-class judge hearing a clip (RATE_ENV leaves it alone)
MAX_RATE = 10.0  # a larger rate asks for MAX_DURATION_S for any request longer than 11 s anyway
DURATION_MARGIN_S = 10.0
MIN_DURATION_S, MAX_DURATION_S = 10, 120  # ZeroGPU defaults to 60 s; a longer ask waits longer in its queue
QUOTA_MESSAGE = ("This Space's free GPU time is used up for you for now (ZeroGPU quota). Try again later, pick "
                 "the espeak-ng baseline (it runs on the CPU), or duplicate the Space to run it on your own GPU.")


def on_zero_gpu() -> bool:
    """Whether this process runs on a ZeroGPU Space."""
    return os.environ.get(ZERO_GPU_ENV, "").strip().lower() in ("true", "1", "yes")


def import_spaces():
    """`spaces` on a ZeroGPU Space (imported now, before CUDA starts), else None."""
    if not on_zero_gpu():
        return None
    import spaces

    return spaces


def engine_options(options: dict) -> dict:
    """The model's load options on a ZeroGPU Space: on "cuda" (attached per call), no CUDA graphs."""
    if not on_zero_gpu():
        return options
    return {**options, "device": options.get("device") or "cuda", "compile": False}


def synthesis_rate() -> float:
    """GPU seconds per second of synthesised audio: RUMIK_ZEROGPU_RATE when set (above 0, at
    most MAX_RATE), else GPU_SECONDS_PER_AUDIO_SECOND. ValueError naming the variable otherwise."""
    raw = os.environ.get(RATE_ENV, "").strip()
    if not raw:
        return GPU_SECONDS_PER_AUDIO_SECOND
    try:
        rate = float(raw)
    except ValueError:
        rate = math.nan
    if not 0 < rate <= MAX_RATE:  # NaN fails too
        raise ValueError(f"{RATE_ENV}={raw!r} is not a rate: give GPU seconds per second of audio, above 0 and at "
                         f"most {MAX_RATE:g} (default {GPU_SECONDS_PER_AUDIO_SECOND}), or unset it.")
    return rate


def duration_for(audio_seconds: float, rate: float | None = None) -> int:
    """GPU seconds to ask for: the audio's cost at `rate` (None: `synthesis_rate()`) plus the
    margin, within ZeroGPU's bounds."""
    rate = synthesis_rate() if rate is None else rate
    return int(min(MAX_DURATION_S, max(MIN_DURATION_S, math.ceil(audio_seconds * rate + DURATION_MARGIN_S))))


def gpu_task(fn: Callable, audio_seconds: Callable[..., float], rate: float | None = None):
    """`fn` inside `spaces.GPU(duration=...)` on a ZeroGPU Space (else `fn` itself).
    audio_seconds: called with fn's arguments, the seconds of audio the call may make or hear;
    rate: GPU seconds per audio second (None: synthesis's, `synthesis_rate()`, read once here)."""
    if not on_zero_gpu():
        return fn
    rate = synthesis_rate() if rate is None else rate
    import spaces

    decorated = spaces.GPU(duration=lambda *a, **k: duration_for(audio_seconds(*a, **k), rate))(fn)
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            with _quota_message():
                yield from decorated(*args, **kwargs)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with _quota_message():
            return decorated(*args, **kwargs)
    return call


class _quota_message:
    """Re-raise ZeroGPU's quota refusal as QUOTA_MESSAGE (a gr.Error: the visitor's toast)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and "quota" in str(exc).lower():
            import gradio as gr

            raise gr.Error(QUOTA_MESSAGE) from exc
        return False
