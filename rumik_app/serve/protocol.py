"""What the speech server needs from a model adapter, and the errors and numbers they share.

    adapter: SpeechAdapter = load_adapter("engine", "tiny")     # rumik_app.serve.adapters
    async for piece in adapter.stream(req, info): ...          # float32 [n] at adapter.sample_rate
    adapter.stats()                                            # AdapterStats for /health and /metrics

Two sides meet here: the HTTP app (`rumik_app.serve.app`) talks to any `SpeechAdapter`; the
adapters (`rumik_app.serve.adapters`) and the scheduler (`rumik_app.serve.scheduler`) raise
these errors and report these stats. Light (no torch, no FastAPI), so both sides and the
command line import it cheaply.

`stream()` raises, before its first piece, `PromptError` (bad input: HTTP 400), `ServerBusy`
(queue full: 503 + Retry-After), `ShuttingDown` (503) or `EngineFailed` (the decode loop
died: 500); abandoning the iteration (`aclose()`, a cancelled task: the client hung up)
frees whatever the request held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from rumik_app.request import RequestLimits, SynthesisRequest

DEFAULT_MAX_BATCH = 16  # --max-batch: rows decoded together (vLLM: its max_num_seqs)
DEFAULT_MAX_QUEUE = 256  # --max-queue: requests waiting for a row before 503
# --max-prompt-tokens: prompt tokens one text chunk may take in the engine's scheduler (it
# sizes the decode cache: this + MAX_NEW_TOKENS_CAP). A chunk holds ~16 s of expected speech
# (~300 characters at the fastest rate) plus a description of up to 300 characters: a few
# hundred tokens with the published tokenizer, ~1,000 with the tiny checkpoint's byte-level one.
DEFAULT_MAX_PROMPT_TOKENS = 1024
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
DEFAULT_MAX_SESSIONS = 128  # --max-sessions: WebSocket sessions open at once (idle ones included)
# The largest message a client may send on a socket (uvicorn's ws_max_size): a text or
# config frame is a few KB (text is at most SERVER_LIMITS.max_chars characters).
MAX_SOCKET_MESSAGE_BYTES = 64 * 1024  # --shutdown-timeout: streaming requests may finish this long after SIGTERM
# Suggested wait for a client refused because the queue is full (seconds; the Retry-After header).
RETRY_AFTER_S = 2
# tokens/s in stats() is measured over this many recent seconds.
RATE_WINDOW_S = 10.0
STOP_POLL_S = 0.05  # how often a stopping adapter checks whether its requests are done


class ServerBusy(RuntimeError):
    """The admission queue is full; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_S):
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The server is shutting down and takes no new requests."""

    retry_after = RETRY_AFTER_S


class EngineFailed(RuntimeError):
    """The engine's decode loop died; the message names the cause (see the server log)."""


@dataclass
class AdapterStats:
    """A snapshot for /health and /metrics.

    queue_depth: requests admitted but not yet decoding; active: requests decoding now
    (batch rows in use); peak_active: the most that were ever decoding at once (the engine:
    rows of one decode step; vLLM: requests in flight); max_batch: rows decoded together at most; tokens_total: tokens
    generated since start; tokens_per_second: over the last few seconds; audio_seconds_total:
    audio produced since start; healthy: False once the decode loop has died; draining: True
    after begin_shutdown(); loaded: False while the model is unloaded to free its memory
    (--idle-unload, POST /v1/admin/unload).
    """

    queue_depth: int = 0
    active: int = 0
    peak_active: int = 0
    max_batch: int = 0
    tokens_total: int = 0
    tokens_per_second: float = 0.0
    audio_seconds_total: float = 0.0
    healthy: bool = True
    draining: bool = False
    loaded: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class SpeechAdapter(Protocol):
    """The server's view of a model (see the module docstring). backend: "engine" or "vllm"."""

    backend: str
    sample_rate: int
    voices: tuple[str, ...]
    max_batch: int
    limits: RequestLimits  # how much one request may ask for (typed/spoken characters, audio seconds)

    async def start(self) -> None: ...

    def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]: ...

    def max_new_tokens_for(self, seconds: float) -> int: ...

    async def unload(self) -> bool: ...

    def stats(self) -> AdapterStats: ...

    def begin_shutdown(self) -> None: ...

    async def stop(self, timeout: float) -> None: ...
