"""The speech server's two adapters between its HTTP app and an engine, and `load_adapter`.

    adapter = load_adapter("engine", "rumik-ai/rumik-oss-1", max_batch=16)   # or "vllm" (the vllm extra)
    await adapter.start()                          # load done; warm-up (and compile) before serving
    info = {}
    async for piece in adapter.stream(SynthesisRequest("Hello.", seed=7), info):
        send(piece)                                # float32 [n] mono at adapter.sample_rate
    info   # {"seed": 7, "tokens": 312, "chunks": 1, "finish_reasons": ["stop_head"]}
    adapter.stats()                                # ServingStats: queue depth, rows, tokens/s
    adapter.begin_shutdown()                       # refuse new requests, let running ones finish
    await adapter.stop(timeout=30)

Both implement `rumik_app.serve.protocol.SpeechAdapter`:

  SchedulerAdapter    the in-process engine (backend "engine") behind cross-request continuous
                      batching (`rumik_app.engine.scheduler.BatchScheduler`: one thread, one
                      SlotDecoder).
  AsyncEngineAdapter  an engine with an async `astream(req, stats=...)` that batches
                      concurrent calls itself: the vLLM engine (backend "vllm", continuous
                      batching in vLLM); the adapter adds the admission limit, drain and stats.

No torch at import time: the server parses its arguments before anything heavy loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from rumik_app.engine.serving import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_QUEUE,
    RATE_WINDOW_S,
    STOP_POLL_S,
    ServerBusy,
    ServingStats,
    ShuttingDown,
)
from rumik_app.request import SERVER_LIMITS, RequestLimits, SynthesisRequest
from rumik_app.serve.protocol import PREPARER, SpeechAdapter

log = logging.getLogger(__name__)
ENGINE_WATCH_S = 1.0  # how often an idle vLLM adapter checks that its engine core is alive


# vLLM keeps its weights and KV blocks for the life of its engine processes here (its sleep
# mode needs CUDA and is not wired in).
VLLM_NO_UNLOAD = ("The vLLM backend does not unload its model (--idle-unload, POST /v1/admin/unload): its memory is "
                  "held until the server stops. Use --backend engine to unload when idle, or stop the server.")


# Text preparation (normalise, tokenise, plan) runs on a few threads of its own: a client that
# sends text after text, each interrupting the last, cannot fill the default executor, and a
# request whose client went away stops at its next chunk. One client (`PREPARER`: an API key's
# owner id, or an address on a server without keys; RequestGate sets it per request) holds at
# most PREPARE_PER_CLIENT of them at once, so another client's text never waits behind one
# client's queue, only behind one preparation.
PREPARE_WORKERS = 2
PREPARE_PER_CLIENT = PREPARE_WORKERS - 1
_SHARES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {client: [semaphore, users]}


@functools.cache
def _prepare_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(PREPARE_WORKERS, thread_name_prefix="rumik-prepare")


async def _submit(fn: Callable, *args) -> Future:
    """`fn(*args)` submitted to the preparation threads once this request's client has a place
    (PREPARE_PER_CLIENT; no wait without a client). The place is held until the thread is done
    with `fn`, also when the caller stops waiting for it (a hang-up)."""
    client = PREPARER.get()
    if client is None:
        return _prepare_pool().submit(fn, *args)
    loop = asyncio.get_running_loop()
    shares = _SHARES.setdefault(loop, {})
    share = shares.setdefault(client, [asyncio.Semaphore(PREPARE_PER_CLIENT), 0])
    share[1] += 1

    def leave(acquired: bool) -> None:
        if acquired:
            share[0].release()
        share[1] -= 1
        if not share[1] and shares.get(client) is share:
            del shares[client]

    try:
        await share[0].acquire()
    except BaseException:
        leave(acquired=False)
        raise
    future = _prepare_pool().submit(fn, *args)

    def done(_future: Future) -> None:  # on the worker thread (or here, for a job cancelled before it ran)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(leave, True)

    future.add_done_callback(done)
    return future


async def prepare_off_loop(prepare: Callable[[SynthesisRequest, threading.Event], object], req: SynthesisRequest):
    """`prepare(req, abandoned)` on the preparation threads, within the client's place; if the
    caller is cancelled (its client hung up or interrupted it), `abandoned` is set and a job not
    yet started is dropped."""
    abandoned = threading.Event()
    future = None
    try:
        future = await _submit(prepare, req, abandoned)
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        abandoned.set()
        if future is not None:
            future.cancel()
        raise


async def off_loop(fn: Callable, *args):
    """`fn(*args)` on the preparation threads, within the client's place (building a dialogue or
    SSML script plans every part: CPU work that must not hold the event loop)."""
    return await asyncio.wrap_future(await _submit(fn, *args))


class EngineVoices:
    """An adapter's voices, read from its engine each time: the checkpoint's and, after
    `engine.use_voices(library)` (--voices), the library's as it is now (it rescans its folder
    when that changes), so routes and request checks see an imported or deleted voice at once."""

    engine = None

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self.engine.voices)

    @property
    def library(self):
        """The engine's VoiceLibrary (rumik_app.voices.library), or None."""
        return getattr(self.engine, "library", None)


class SchedulerAdapter(EngineVoices):
    """This process's `TTSEngine` behind a `BatchScheduler` (continuous batching, one thread)."""

    backend = "engine"

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.engine = scheduler.engine
        self.layout = self.engine.layout
        self.sample_rate = self.engine.sample_rate
        self.max_batch = scheduler.max_batch
        self.limits = scheduler.limits

    @classmethod
    def load(cls, model: str, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
             max_prompt_tokens: int | None = None, limits: RequestLimits = SERVER_LIMITS,
             idle_unload_s: float | None = None, **engine_options) -> "SchedulerAdapter":
        """Load the checkpoint (`load_engine`, backend "engine") and build the scheduler around it
        (idle_unload_s: unload the model after this long without work; see BatchScheduler)."""
        from rumik_app.engine.loading import load_engine
        from rumik_app.engine.scheduler import BatchScheduler

        engine = load_engine(model, backend="engine", **engine_options)
        sizes = {} if max_prompt_tokens is None else {"max_prompt_tokens": max_prompt_tokens}
        return cls(BatchScheduler(engine, max_batch=max_batch, max_queue=max_queue, limits=limits,
                                  idle_unload_s=idle_unload_s, **sizes))

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

        self.scheduler.check_admission()  # refuse a full queue before any work
        chunks = await prepare_off_loop(self.scheduler.prepare, req)  # normalise, tokenise, plan
        job = self.scheduler.submit(req, sink=sink, chunks=chunks)
        try:
            while True:
                event = await events.get()
                if isinstance(event, np.ndarray):
                    if info is not None:  # live: chunk_samples says where each chunk lies (word timestamps)
                        info.update(job.stats)
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

    async def unload(self) -> bool:
        """Unload the model now (False if requests are running); the next request reloads it."""
        return await asyncio.to_thread(self.scheduler.unload)

    def stats(self) -> ServingStats:
        return self.scheduler.stats()

    def begin_shutdown(self) -> None:
        self.scheduler.close()

    async def stop(self, timeout: float) -> None:
        await asyncio.to_thread(self.scheduler.stop, timeout)


class AsyncEngineAdapter(EngineVoices):
    """An engine with an async `astream(req, stats=...)` that batches concurrent calls itself:
    the vLLM engine (`load_engine(..., backend="vllm")`, continuous batching in vLLM's
    scheduler). This adapter adds the server's admission limit, drain and stats.

    Admission: at most `max_batch + max_queue` requests at once, counting both this server's
    requests and every unfinished vLLM request of the engine (`num_unfinished_requests()`,
    e.g. another caller of a shared engine); beyond that `stream` raises ServerBusy (503 +
    Retry-After). vLLM decodes up to `max_batch` of them together (its `max_num_seqs`, set
    by `load`) and queues the rest itself. Stats: `active` is vLLM's unfinished requests up
    to max_batch, `queue_depth` the rest; `tokens_*` count this server's requests.

    Drain (`begin_shutdown`, SIGTERM): new requests get ShuttingDown (503); requests that
    have not produced audio yet are aborted in vLLM and get ShuttingDown too (nothing was
    sent, a client can retry elsewhere); streaming ones run to their end.

    Engine death: when vLLM's engine core dies (seen by a request, or by a once-a-second
    watch while idle), every request without audio yet and every new one gets EngineDied
    (503 + Retry-After: retry, on this server once it is back), the drain begins and
    `on_engine_death` is called (the server's command exits non-zero then, so a supervisor
    restarts it: a dead engine core does not come back inside its process). `engine_died`
    stays True.
    """

    backend = "vllm"

    def __init__(self, engine, max_batch: int | None = None, max_queue: int = DEFAULT_MAX_QUEUE,
                 owns_engine: bool = False, limits: RequestLimits = SERVER_LIMITS):
        self.engine = engine
        self.layout = engine.layout
        self.limits = limits
        self.sample_rate = int(engine.sample_rate)
        self.max_batch = int(max_batch if max_batch is not None else getattr(engine, "max_num_seqs", DEFAULT_MAX_BATCH))
        self.max_queue = max_queue
        self.owns_engine = owns_engine  # stop() closes only an engine this backend loaded
        self._in_flight = 0
        self._peak_in_flight = 0
        self._live: dict[int, dict] = {}  # id -> stats dict of each running request (its token count grows)
        self._tokens_done = 0
        self._audio_samples = 0
        self._rate: deque[tuple[float, int]] = deque()  # (time, tokens_total) samples, last RATE_WINDOW_S
        self._draining = False
        self._drain = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.engine_died = False
        self.on_engine_death: Callable[[], None] | None = None  # the server's exit (rumik_app.serve.__main__)
        self._watch: asyncio.Task | None = None

    @classmethod
    def load(cls, model: str, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
             limits: RequestLimits = SERVER_LIMITS, **engine_options) -> "AsyncEngineAdapter":
        """Start vLLM on `model` with `max_num_seqs=max_batch`; engine_options go to
        `load_engine(backend="vllm")` (device, dtype, compile, tensor_parallel_size,
        data_parallel_size, gpu_memory_utilization, ...)."""
        from rumik_app.engine.loading import load_engine

        engine = load_engine(model, backend="vllm", max_num_seqs=max_batch, **engine_options)
        return cls(engine, max_batch=max_batch, max_queue=max_queue, owns_engine=True, limits=limits)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()  # from_pretrained has warmed vLLM up already
        self._watch = asyncio.ensure_future(self._watch_engine())

    async def _watch_engine(self) -> None:
        """Notice a dead engine core even when no request is running."""
        while not self.engine_died:
            if not self._healthy():
                self._engine_dead("vLLM's engine core is no longer running")
                return
            await asyncio.sleep(ENGINE_WATCH_S)

    def _engine_dead(self, cause: str) -> EngineDied:
        """Record the death once (drain, `on_engine_death`); the error for the request that saw it."""
        if not self.engine_died:
            self.engine_died = True
            log.error("%s; refusing requests (503) and shutting down so a supervisor can restart the server", cause)
            self.begin_shutdown()
            if self.on_engine_death is not None:
                self.on_engine_death()
        return EngineDied("The speech engine stopped and the server is restarting; retry in a few seconds.")

    async def unload(self) -> bool:
        raise NotImplementedError(VLLM_NO_UNLOAD)

    def _unfinished(self) -> int:
        count = getattr(self.engine, "num_unfinished_requests", None)
        return int(count()) if count is not None else 0

    def _admit(self) -> None:
        if self.engine_died or not self._healthy():
            raise self._engine_dead("vLLM's engine core is not running (see the log above)")
        if self._draining:
            raise ShuttingDown("The server is shutting down and takes no new requests; retry on another instance.")
        busy = max(self._in_flight, self._unfinished())
        if busy >= self.max_batch + self.max_queue:
            raise ServerBusy(f"The server is busy: {busy} requests are decoding or waiting (at most "
                             f"{self.max_batch} decode together, {self.max_queue} wait); retry shortly.")

    async def stream(self, req: SynthesisRequest, info: dict | None = None) -> AsyncIterator[np.ndarray]:
        self._admit()  # cheap: a full queue is refused before any work
        await prepare_off_loop(lambda req, _abandoned: self.engine.plan(req, self.limits), req)  # the bounds
        self._loop = self._loop or asyncio.get_running_loop()
        self._in_flight += 1
        self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        stats: dict = {}
        self._live[id(stats)] = stats
        try:
            async with contextlib.aclosing(self.engine.astream(req, stats=stats)) as pieces:
                piece = await self._first_piece(pieces)
                while piece is not None:
                    self._audio_samples += len(piece)
                    self._sample_rate_window()
                    if info is not None:  # live: chunk_samples says where each chunk lies (word timestamps)
                        info.update(stats)
                    yield piece
                    piece = await anext(pieces, None)
        except Exception as exc:
            if _is_engine_dead(exc) or (not self._healthy() and not isinstance(exc, ShuttingDown)):
                raise self._engine_dead(f"vLLM's engine core died ({type(exc).__name__}: {exc})") from exc
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
            if self.engine_died:  # the drain is the engine's death (the watcher saw it first): say so
                raise self._engine_dead("vLLM's engine core died")
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

    def stats(self) -> ServingStats:
        healthy = self._healthy()
        unfinished = self._unfinished() if healthy else 0
        active = min(unfinished, self.max_batch)
        total = self._tokens_total()
        now = time.monotonic()
        window = [(t, n) for t, n in self._rate if now - t <= RATE_WINDOW_S]
        rate = (total - window[0][1]) / (now - window[0][0]) if window and now > window[0][0] else 0.0
        return ServingStats(queue_depth=unfinished - active, active=active,
                            peak_active=min(self._peak_in_flight, self.max_batch), max_batch=self.max_batch,
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
        if self._watch is not None:
            self._watch.cancel()
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(STOP_POLL_S)
        if self.owns_engine:
            await asyncio.to_thread(self.engine.close)


class EngineDied(ShuttingDown):
    """vLLM's engine core died: 503 + Retry-After while the server exits for a restart."""


def _is_engine_dead(exc: BaseException) -> bool:
    """vLLM's EngineDeadError (matched by name: no vLLM import here)."""
    return any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__)


def load_adapter(backend: str, model: str, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
                 max_prompt_tokens: int | None = None, idle_unload_s: float | None = None,
                 **engine_options) -> SpeechAdapter:
    """Load `model` on `backend` ("engine" or "vllm") behind its adapter.

    max_prompt_tokens: the scheduler's decode-cache size (engine only; vLLM sizes its paged
    cache itself). idle_unload_s: unload the model after this long without a request (engine
    only). engine_options: `load_engine`'s (device, dtype, compile; vLLM's
    tensor_parallel_size, ...); for vLLM `max_batch` becomes its `max_num_seqs`.
    """
    from rumik_app.engine.loading import check_backend

    if check_backend(backend) == "engine":
        return SchedulerAdapter.load(model, max_batch=max_batch, max_queue=max_queue,
                                     max_prompt_tokens=max_prompt_tokens, idle_unload_s=idle_unload_s,
                                     **engine_options)
    if idle_unload_s is not None:
        raise ValueError(VLLM_NO_UNLOAD)
    return AsyncEngineAdapter.load(model, max_batch=max_batch, max_queue=max_queue, **engine_options)
