"""What a serving engine raises and reports: admission errors, the stats snapshot, the batch and queue sizes.

    scheduler = BatchScheduler(engine, max_batch=DEFAULT_MAX_BATCH, max_queue=DEFAULT_MAX_QUEUE)
    scheduler.submit(req)        # ServerBusy (queue full), ShuttingDown, EngineFailed
    scheduler.stats()            # ServingStats for /health and /metrics

Shared by the in-process scheduler (`rumik_app.engine.scheduler`) and the speech server's
adapters (`rumik_app.serve.adapters`, vLLM's included), so both raise the same errors and
report the same numbers. Light (no torch), so the server's command line imports it cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

DEFAULT_MAX_BATCH = 16  # --max-batch: rows decoded together (vLLM: its max_num_seqs)
DEFAULT_MAX_QUEUE = 256  # --max-queue: requests waiting for a row before 503
# --max-prompt-tokens: prompt tokens one text chunk may take in the engine's scheduler (it
# sizes the decode cache: this + MAX_NEW_TOKENS_CAP). A chunk holds ~16 s of expected speech
# (~300 characters at the fastest rate) plus a description of up to 300 characters: a few
# hundred tokens with the published tokenizer, ~1,000 with the tiny checkpoint's byte-level one.
DEFAULT_MAX_PROMPT_TOKENS = 1024
# Suggested wait for a client refused because the queue is full (seconds; the Retry-After header).
RETRY_AFTER_S = 2
# tokens/s in stats() is measured over this many recent seconds.
RATE_WINDOW_S = 10.0
STOP_POLL_S = 0.05  # how often a stopping scheduler or adapter checks whether its requests are done


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
class ServingStats:
    """A snapshot for /health and /metrics.

    queue_depth: requests admitted but not yet decoding; active: requests decoding now
    (batch rows in use); peak_active: the most that were ever decoding at once (the engine:
    rows of one decode step; vLLM: requests in flight); max_batch: rows decoded together at
    most; tokens_total: tokens generated since start; tokens_per_second: over the last few
    seconds; audio_seconds_total: audio produced since start; healthy: False once the decode
    loop has died; draining: True after begin_shutdown(); loaded: False while the model is
    unloaded to free its memory (--idle-unload, POST /v1/admin/unload).
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
