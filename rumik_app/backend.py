"""What the speech server needs from a model backend, and the two backends it can run on.

    backend = load_backend("engine", "rumik-ai/rumik-oss-1", max_batch=16)   # or "vllm" (issue 11)
    await backend.start()                          # load done; warm-up (and compile) before serving
    info = {}
    async for piece in backend.stream(SynthesisRequest("Hello.", seed=7), info):
        send(piece)                                # float32 [n] mono at backend.sample_rate
    info   # {"seed": 7, "tokens": 312, "chunks": 1, "finish_reasons": ["stop_head"]}
    backend.stats()                                # BackendStats: queue depth, rows, tokens/s
    backend.begin_shutdown()                       # refuse new requests, let running ones finish
    await backend.stop(timeout=30)

A backend is anything with the `SpeechBackend` methods. `stream()` raises, before its first
piece, `PromptError` (bad input: HTTP 400), `ServerBusy` (queue full: 503 + Retry-After) or
`ShuttingDown` (503); abandoning the iteration (`aclose()`, a cancelled task: the client
hung up) frees whatever the request held. Two implementations:

  EngineBackend    this process's engine with cross-request continuous batching
                   (`rumik_app.scheduler.BatchScheduler`: one thread, one SlotDecoder).
  AstreamBackend   any engine with an async `astream(req, stats=...)`, e.g. the vLLM engine
                   of issue 11 (`TTSEngine.from_pretrained(..., backend="vllm")`), which
                   batches on its own; this adapter adds only the admission limit and stats.

No torch at import time: the server parses its arguments before anything heavy loads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from rumik_app.request import SynthesisRequest

BACKENDS = ("engine", "vllm")
DEFAULT_MAX_BATCH = 16
DEFAULT_MAX_QUEUE = 256
# Suggested wait for a client refused because the queue is full (seconds; the Retry-After header).
RETRY_AFTER_S = 2


class ServerBusy(RuntimeError):
    """The admission queue is full; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_S):
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The backend is shutting down and takes no new requests."""

    retry_after = RETRY_AFTER_S


class BackendFailed(RuntimeError):
    """The backend's decode loop died; the message names the cause (see the server log)."""


@dataclass
class BackendStats:
    """A snapshot for /health and /metrics.

    queue_depth: requests admitted but not yet decoding; active: requests decoding now
    (batch rows in use); max_batch: rows decoded together at most; tokens_total: tokens
    generated since start; tokens_per_second: over the last few seconds; audio_seconds_total:
    audio produced since start; healthy: False once the decode loop has died; draining: True
    after begin_shutdown().
    """

    queue_depth: int = 0
    active: int = 0
    max_batch: int = 0
    tokens_total: int = 0
    tokens_per_second: float = 0.0
    audio_seconds_total: float = 0.0
    healthy: bool = True
    draining: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class SpeechBackend(Protocol):
    """The server's view of a model backend (see the module docstring)."""

    name: str
    sample_rate: int
    voices: tuple[str, ...]
    max_batch: int

    async def start(self) -> None: ...

    def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]: ...

    def max_new_tokens_for(self, seconds: float) -> int: ...

    def stats(self) -> BackendStats: ...

    def begin_shutdown(self) -> None: ...

    async def stop(self, timeout: float) -> None: ...


class EngineBackend:
    """This process's `TTSEngine` behind a `BatchScheduler` (continuous batching, one thread)."""

    name = "engine"

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.engine = scheduler.engine
        self.sample_rate = self.engine.sample_rate
        self.voices = tuple(self.engine.voices)
        self.max_batch = scheduler.max_batch

    @classmethod
    def load(cls, model: str, device: str | None = None, dtype: str | None = None, compile: bool | None = None,
             **scheduler_options) -> "EngineBackend":
        """Load the checkpoint (`TTSEngine.from_pretrained`) and build the scheduler around it."""
        from rumik_app.engine import TTSEngine
        from rumik_app.scheduler import BatchScheduler

        engine = TTSEngine.from_pretrained(model, device=device, dtype=dtype, compile=compile)
        return cls(BatchScheduler(engine, **scheduler_options))

    async def start(self) -> None:
        await asyncio.to_thread(self.scheduler.start)

    async def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def sink(event) -> None:  # called on the scheduler's thread
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                pass

        job = self.scheduler.submit(req, sink=sink)
        try:
            while True:
                event = await events.get()
                if isinstance(event, np.ndarray):
                    yield event
                elif event is None:
                    return
                else:
                    raise event
        finally:
            job.cancel()  # no-op when finished; frees the batch row when the client went away
            if info is not None:
                info.update(job.stats)

    def max_new_tokens_for(self, seconds: float) -> int:
        return self.engine.max_new_tokens_for(seconds)

    def stats(self) -> BackendStats:
        return self.scheduler.stats()

    def begin_shutdown(self) -> None:
        self.scheduler.close()

    async def stop(self, timeout: float) -> None:
        await asyncio.to_thread(self.scheduler.stop, timeout)


class AstreamBackend:
    """Any engine with `astream(req, stats=...)` (an async generator of float32 pieces) that
    batches concurrent calls itself, e.g. issue 11's vLLM engine. Adds the admission limit
    (`max_batch + max_queue` requests in flight), shutdown and stats."""

    name = "vllm"

    def __init__(self, engine, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE):
        self.engine = engine
        self.sample_rate = int(engine.sample_rate)
        self.voices = tuple(engine.voices)
        self.max_batch, self.max_queue = max_batch, max_queue
        self._in_flight = 0
        self._draining = False
        self._tokens_total = 0
        self._audio_samples = 0
        self._started = time.monotonic()

    @classmethod
    def load(cls, model: str, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
             **engine_options) -> "AstreamBackend":
        from rumik_app.engine import TTSEngine

        try:
            engine = TTSEngine.from_pretrained(model, backend="vllm", **engine_options)
        except TypeError as exc:
            raise RuntimeError("This checkout has no vLLM backend yet (issue 11: rumik_app/vllm_backend.py, "
                               "TTSEngine.from_pretrained(backend='vllm')). Use --backend engine.") from exc
        return cls(engine, max_batch=max_batch, max_queue=max_queue)

    async def start(self) -> None:
        return None

    async def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]:
        if self._draining:
            raise ShuttingDown("The server is shutting down and takes no new requests; retry on another instance.")
        if self._in_flight >= self.max_batch + self.max_queue:
            raise ServerBusy(f"The server is busy ({self._in_flight} requests in flight); retry shortly.")
        self._in_flight += 1
        stats: dict = {}
        try:
            async for piece in self.engine.astream(req, stats=stats):
                self._audio_samples += len(piece)
                yield piece
        finally:
            self._in_flight -= 1
            self._tokens_total += int(stats.get("tokens", 0))
            if info is not None:
                info.update(stats)

    def max_new_tokens_for(self, seconds: float) -> int:
        return self.engine.max_new_tokens_for(seconds)

    def stats(self) -> BackendStats:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return BackendStats(queue_depth=max(0, self._in_flight - self.max_batch),
                            active=min(self._in_flight, self.max_batch), max_batch=self.max_batch,
                            tokens_total=self._tokens_total, tokens_per_second=self._tokens_total / elapsed,
                            audio_seconds_total=self._audio_samples / self.sample_rate, draining=self._draining)

    def begin_shutdown(self) -> None:
        self._draining = True

    async def stop(self, timeout: float) -> None:
        self._draining = True
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        close = getattr(self.engine, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


def load_backend(name: str, model: str, device: str | None = None, dtype: str | None = None,
                 compile: bool | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 max_queue: int = DEFAULT_MAX_QUEUE, **options) -> SpeechBackend:
    """Load `model` on backend `name` ("engine" or "vllm"); options go to that backend.

    engine: `max_prompt_tokens` (decode-cache size). vllm: e.g. `tensor_parallel_size`,
    `gpu_memory_utilization` (passed to `TTSEngine.from_pretrained(backend="vllm")`).
    """
    if name == "engine":
        return EngineBackend.load(model, device=device, dtype=dtype, compile=compile, max_batch=max_batch,
                                  max_queue=max_queue, **options)
    if name == "vllm":
        engine_options = {k: v for k, v in dict(device=device, dtype=dtype, **options).items() if v is not None}
        return AstreamBackend.load(model, max_batch=max_batch, max_queue=max_queue, **engine_options)
    raise ValueError(f"Unknown backend {name!r}. Choose one of: {', '.join(BACKENDS)}.")
