"""What the speech server needs from a model adapter, and what every route shares.

    adapter: SpeechAdapter = load_adapter("engine", "tiny")     # rumik_app.serve.adapters
    async for piece in adapter.stream(req, info): ...          # float32 [n] at adapter.sample_rate
    adapter.stats()                                            # ServingStats for /health and /metrics

Two sides meet here: the routes (`rumik_app.serve.openai`, `.silk`, `.text_in`, `.ops`, through
`rumik_app.serve.context.ServeContext`) talk to any `SpeechAdapter`; the adapters
(`rumik_app.serve.adapters`) and the engine's scheduler (`rumik_app.engine.scheduler`) raise the
errors and report the stats of `rumik_app.engine.serving`. Light (no torch, no FastAPI), so both
sides and the command line import it cheaply.

`stream()` raises, before its first piece, `PromptError` (bad input: HTTP 400), `ServerBusy`
(queue full: 503 + Retry-After), `ShuttingDown` (503) or `EngineFailed` (the decode loop
died: 500); abandoning the iteration (`aclose()`, a cancelled task: the client hung up)
frees whatever the request held. `info` is filled as the stream goes, not only at its end:
`info["chunk_samples"]` holds each finished chunk's decoded length before that chunk's last piece
is yielded (word timestamps, `rumik_app.serve.words`, place each chunk in the stream with it).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from rumik_app.engine.serving import ServingStats
from rumik_app.model.tokens import TokenLayout
from rumik_app.request import RequestLimits, SynthesisRequest

if TYPE_CHECKING:
    from rumik_app.voices.library import VoiceLibrary

SEED_HEADER = "x-rumik-seed"  # every protocol's HTTP answer: the seed used (drawn when none was given)
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0  # --shutdown-timeout: streaming requests may finish this long after SIGTERM
DEFAULT_MAX_SESSIONS = 128  # --max-sessions: WebSocket sessions open at once (idle ones included)
# --max-sessions-per-client: of those, one client address's (a voice-agent host: raise it)
DEFAULT_MAX_SESSIONS_PER_CLIENT = 32
# Deadlines per connection (rumik_app.serve.connections, .gate): a slow or idle client is closed.
DEFAULT_HEADER_TIMEOUT_S = 10.0  # --header-timeout: request line and headers, from connect or the last response
DEFAULT_BODY_TIMEOUT_S = 30.0  # --body-timeout: a whole request body (at most 64 KB) once its headers are in
DEFAULT_KEEP_ALIVE_S = 5.0  # --keep-alive-timeout: an idle kept-alive connection (uvicorn's default)
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 64  # --max-connections-per-client: HTTP connections of one client address
# The largest message a client may send on a socket (uvicorn's ws_max_size): a text or
# config frame is a few KB (text is at most SERVER_LIMITS.max_chars characters).
MAX_SOCKET_MESSAGE_BYTES = 64 * 1024
OPEN_OWNER = "open"  # who owns stored things (lexicons) on a server without API keys
MAX_BATCH_BODY_BYTES = 256 * 1024  # /v1/audio/speech/batch: 16,384 characters even as \uXXXX escapes, with room
MAX_LEXICON_BODY_BYTES = 1 << 20  # a lexicon upload (rumik_app.serve.lexicons): the largest allowed, with room
# A long job (rumik_app.serve.jobs): a speech request whose input may be a chapter (50,000 characters, up to
# 12 bytes each as JSON escapes), with room.
MAX_JOB_BODY_BYTES = 1 << 20
# Whose request this is, for the preparation threads' per-client share (serve.adapters): an API
# key's owner id, or the client's address on a server without keys. RequestGate sets it per request.
PREPARER: contextvars.ContextVar[str | None] = contextvars.ContextVar("rumik_preparer", default=None)


@runtime_checkable
class SpeechAdapter(Protocol):
    """The server's view of a model (see the module docstring). backend: "engine" or "vllm"."""

    backend: str
    sample_rate: int
    voices: tuple[str, ...]  # the checkpoint's, then the voice library's as it is now (--voices)
    library: VoiceLibrary | None  # the engine's voice library (rumik_app.serve.voices), if any
    max_batch: int
    limits: RequestLimits  # how much one request may ask for (typed/spoken characters, audio seconds)
    layout: TokenLayout  # the checkpoint's audio tokens: what a script is planned with before it takes rows

    async def start(self) -> None: ...

    def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]: ...

    def max_new_tokens_for(self, seconds: float) -> int: ...

    async def unload(self) -> bool: ...

    def stats(self) -> ServingStats: ...

    def begin_shutdown(self) -> None: ...

    async def stop(self, timeout: float) -> None: ...
