"""What the speech server needs from a model backend, and the two backends it can run on.

    backend = load_backend("engine", "rumik-ai/rumik-oss-1", max_batch=16)   # or "vllm" (.venv-vllm)
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
  AstreamBackend   the vLLM engine (`TTSEngine.from_pretrained(..., backend="vllm")`, or
                   any engine with an async `astream(req, stats=...)`), which batches on its
                   own (continuous batching in vLLM); this adapter adds the admission
                   limit, drain and stats.

No torch at import time: the server parses its arguments before anything heavy loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
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
# tokens/s in stats() is measured over this many recent seconds.
RATE_WINDOW_S = 10.0
STOP_POLL_S = 0.05


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
        from rumik_app.engine.local import TTSEngine
        from rumik_app.serve.scheduler import BatchScheduler

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
    """An engine with an async `astream(req, stats=...)` that batches concurrent calls itself:
    the vLLM engine (`TTSEngine.from_pretrained(..., backend="vllm")`, continuous batching in
    vLLM's scheduler). This adapter adds the server's admission limit, drain and stats.

    Admission: at most `max_batch + max_queue` requests at once, counting both this server's
    requests and every unfinished vLLM request of the engine (`num_unfinished_requests()`,
    e.g. another caller of a shared engine); beyond that `stream` raises ServerBusy (503 +
    Retry-After). vLLM decodes up to `max_batch` of them together (its `max_num_seqs`, set
    by `load`) and queues the rest itself. Stats: `active` is vLLM's unfinished requests up
    to max_batch, `queue_depth` the rest; `tokens_*` count this server's requests.

    Drain (`begin_shutdown`, SIGTERM): new requests get ShuttingDown (503); requests that
    have not produced audio yet are aborted in vLLM and get ShuttingDown too (nothing was
    sent, a client can retry elsewhere); streaming ones run to their end.
    """

    name = "vllm"

    def __init__(self, engine, max_batch: int | None = None, max_queue: int = DEFAULT_MAX_QUEUE,
                 owns_engine: bool = False):
        self.engine = engine
        self.sample_rate = int(engine.sample_rate)
        self.voices = tuple(engine.voices)
        self.max_batch = int(max_batch if max_batch is not None else getattr(engine, "max_num_seqs", DEFAULT_MAX_BATCH))
        self.max_queue = max_queue
        self.owns_engine = owns_engine  # stop() closes only an engine this backend loaded
        self._in_flight = 0
        self._live: dict[int, dict] = {}  # id -> stats dict of each running request (its token count grows)
        self._tokens_done = 0
        self._audio_samples = 0
        self._rate: deque[tuple[float, int]] = deque()  # (time, tokens_total) samples, last RATE_WINDOW_S
        self._draining = False
        self._drain = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def load(cls, model: str, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
             **engine_options) -> "AstreamBackend":
        """Start vLLM on `model` with `max_num_seqs=max_batch`; engine_options go to
        `TTSEngine.from_pretrained(backend="vllm")` (device, dtype, compile,
        tensor_parallel_size, data_parallel_size, gpu_memory_utilization, ...)."""
        from rumik_app.engine.local import TTSEngine

        engine = TTSEngine.from_pretrained(model, backend="vllm", max_num_seqs=max_batch, **engine_options)
        return cls(engine, max_batch=max_batch, max_queue=max_queue, owns_engine=True)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()  # from_pretrained has warmed vLLM up already

    def _unfinished(self) -> int:
        count = getattr(self.engine, "num_unfinished_requests", None)
        return int(count()) if count is not None else 0

    def _admit(self) -> None:
        if self._draining:
            raise ShuttingDown("The server is shutting down and takes no new requests; retry on another instance.")
        if not self._healthy():
            raise BackendFailed("vLLM's engine core is not running (see the server log; restart the server)")
        busy = max(self._in_flight, self._unfinished())
        if busy >= self.max_batch + self.max_queue:
            raise ServerBusy(f"The server is busy: {busy} requests are decoding or waiting (at most "
                             f"{self.max_batch} decode together, {self.max_queue} wait); retry shortly.")

    async def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]:
        self._admit()
        self._loop = self._loop or asyncio.get_running_loop()
        self._in_flight += 1
        stats: dict = {}
        self._live[id(stats)] = stats
        try:
            async with contextlib.aclosing(self.engine.astream(req, stats=stats)) as pieces:
                piece = await self._first_piece(pieces)
                while piece is not None:
                    self._audio_samples += len(piece)
                    self._sample_rate_window()
                    yield piece
                    piece = await anext(pieces, None)
        except Exception as exc:
            if _is_engine_dead(exc):
                raise BackendFailed(f"vLLM's engine core died ({type(exc).__name__}: {exc})") from exc
            raise
        finally:
            self._in_flight -= 1
            del self._live[id(stats)]
            self._tokens_done += int(stats.get("tokens", 0))
            self._sample_rate_window()
            if info is not None:
                info.update(stats)

    async def _first_piece(self, pieces: AsyncIterator[np.ndarray]) -> np.ndarray | None:
        """The first piece, or ShuttingDown if the drain begins before it (the vLLM request is
        then aborted); cancelling the caller aborts it too."""
        piece = asyncio.ensure_future(anext(pieces, None))
        drain = asyncio.ensure_future(self._drain.wait())
        try:
            await asyncio.wait({piece, drain}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drain.cancel()
            if not piece.done():
                piece.cancel()
                await asyncio.gather(piece, return_exceptions=True)
        if piece.cancelled():
            raise ShuttingDown("The server is shutting down; this request was not started. Retry.")
        return piece.result()

    def _tokens_total(self) -> int:
        return self._tokens_done + sum(int(s.get("tokens", 0)) for s in self._live.values())

    def _sample_rate_window(self) -> None:
        now = time.monotonic()
        self._rate.append((now, self._tokens_total()))
        while len(self._rate) > 1 and now - self._rate[0][0] > RATE_WINDOW_S:
            self._rate.popleft()

    def _healthy(self) -> bool:
        check = getattr(self.engine, "is_healthy", None)
        return bool(check()) if check is not None else True

    def max_new_tokens_for(self, seconds: float) -> int:
        return self.engine.max_new_tokens_for(seconds)

    def stats(self) -> BackendStats:
        healthy = self._healthy()
        unfinished = self._unfinished() if healthy else 0
        active = min(unfinished, self.max_batch)
        total = self._tokens_total()
        now = time.monotonic()
        window = [(t, n) for t, n in self._rate if now - t <= RATE_WINDOW_S]
        rate = (total - window[0][1]) / (now - window[0][0]) if window and now > window[0][0] else 0.0
        return BackendStats(queue_depth=unfinished - active, active=active, max_batch=self.max_batch,
                            tokens_total=total, tokens_per_second=rate,
                            audio_seconds_total=self._audio_samples / self.sample_rate, healthy=healthy,
                            draining=self._draining)

    def begin_shutdown(self) -> None:
        self._draining = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._drain.set()
        else:
            loop.call_soon_threadsafe(self._drain.set)

    async def stop(self, timeout: float) -> None:
        self.begin_shutdown()
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(STOP_POLL_S)
        if self.owns_engine:
            await asyncio.to_thread(self.engine.close)


def _is_engine_dead(exc: BaseException) -> bool:
    """vLLM's EngineDeadError (matched by name: no vLLM import here)."""
    return any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__)


def load_backend(name: str, model: str, device: str | None = None, dtype: str | None = None,
                 compile: bool | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 max_queue: int = DEFAULT_MAX_QUEUE, **options) -> SpeechBackend:
    """Load `model` on backend `name` ("engine" or "vllm"); options go to that backend.

    engine: `max_prompt_tokens` (decode-cache size). vllm: `tensor_parallel_size`,
    `data_parallel_size`, `gpu_memory_utilization` and other keywords of
    `TTSEngine.from_pretrained(backend="vllm")`; `max_batch` becomes vLLM's `max_num_seqs`.
    """
    if name == "engine":
        return EngineBackend.load(model, device=device, dtype=dtype, compile=compile, max_batch=max_batch,
                                  max_queue=max_queue, **options)
    if name == "vllm":
        given = dict(device=device, dtype=dtype, compile=compile, **options)
        return AstreamBackend.load(model, max_batch=max_batch, max_queue=max_queue,
                                   **{k: v for k, v in given.items() if v is not None})
    raise ValueError(f"Unknown backend {name!r}. Choose one of: {', '.join(BACKENDS)}.")
