"""Cross-request continuous batching (docs/ARCHITECTURE.md §12): many requests decode together in one `SlotDecoder`.

    scheduler = BatchScheduler(engine, max_batch=16, max_queue=256)
    scheduler.start()                                    # warm-up (compiled if engine.compile), then serve
    job = scheduler.submit(SynthesisRequest("Hello.", seed=7))   # PromptError / ServerBusy / ShuttingDown
    for piece in job:                                    # float32 [n] at 24 kHz, as frames are decoded
        play(piece)
    job.cancel()                                         # the client went away: its row is freed
    scheduler.stop(timeout=30)

The speech server runs it behind `rumik_app.serve.adapters.SchedulerAdapter`; no HTTP here.

One thread owns the model through a dedicated `SlotDecoder` with `max_batch` slots over a
static KV cache of `max_prompt_tokens + MAX_NEW_TOKENS_CAP` positions. It loops:
  1. between frames (every Q = 8 tokens all rows share phase 0, so a row can join there)
     it frees the rows of cancelled requests and prefills waiting chunks into free slots:
     continuous batching, a request that arrives while others decode joins at the next
     frame boundary (at most one frame, 80 ms of audio, later), not after the batch;
  2. `run_frame()`: Q tokens for every slot, one host copy;
  3. each row's tokens go to its request's `StreamAssembler` (`rumik_app.engine.stream`, the
     one every streaming path uses): every 2 frames first (low time to first audio), then
     every 5, its streaming Mimi decoder turns them into audio that goes to the request's
     sink; a finished row frees its slot at once.
Long text is planned as `TTSEngine.plan` does (chunks of ~16 s with seeds seed, seed+1, ...);
the chunks of one request run one after another (the next is queued ahead of new requests
when the previous finishes) and the assembler joins them with the engine's crossfade, so a
request's audio equals `TTSEngine.stream` of it up to float rounding of the logits
(different cache and batch shapes) and of nothing else.

Batch invariance: every row is prefilled alone and then decoded in a step of fixed shape
(all slots, the whole cache) whose rows never mix, so a request's tokens and audio are
bit-identical whatever else is in the batch, and whenever it joined.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from rumik_app.decode.sampling import FINISH_MAX_TOKENS, FINISH_NAMES, RowParams
from rumik_app.decode.slots import FrameResult, SlotDecoder, cache_length
from rumik_app.engine.local import TTSEngine
from rumik_app.engine.serving import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_PROMPT_TOKENS,
    DEFAULT_MAX_QUEUE,
    RATE_WINDOW_S,
    STOP_POLL_S,
    EngineFailed,
    ServerBusy,
    ServingStats,
    ShuttingDown,
)
from rumik_app.engine.stream import FIRST_PIECE_FRAMES, PIECE_FRAMES, StreamAssembler
from rumik_app.model.quantize import human_bytes
from rumik_app.prompt import PromptError
from rumik_app.request import MAX_NEW_TOKENS_CAP, SERVER_LIMITS, RequestLimits, SynthesisRequest
from rumik_app.voices.lora import AdapterBankFull

log = logging.getLogger(__name__)


class JobCancelled(RuntimeError):
    """The request was cancelled (its consumer went away)."""


@dataclass
class Chunk:
    """One planned text chunk of a request: the chunk request, its prompt ids and sampling row."""

    request: SynthesisRequest
    prompt_ids: list[int]
    row: RowParams


class Job:
    """One request inside the scheduler: its chunks, progress and output.

    Output events, in order: float32 audio pieces, then one end marker, `None` on success or
    an Exception. They go to `sink` (called on the scheduler's thread; must not block), or,
    without a sink, to an internal queue read by iterating the job.
    assembler: the request's `StreamAssembler` (its audio, across chunks).
    stats: seed, tokens, chunks, finish_reasons (as `TTSEngine.stream` fills them), plus
    prompt_tokens, audio_samples, queued_s (submit -> first prefill) and first_audio_s (submit -> first piece).
    """

    def __init__(self, request: SynthesisRequest, chunks: list[Chunk], assembler: StreamAssembler,
                 sink: Callable[[object], None] | None, wake: Callable[[], None]):
        self.request = request
        self.chunks = chunks
        self.assembler = assembler
        self.stats: dict = assembler.stats
        self.stats.update(prompt_tokens=sum(len(c.prompt_ids) for c in chunks), audio_samples=0, queued_s=None,
                          first_audio_s=None)
        self.submitted = time.perf_counter()
        self.cancelled = False
        self.closed = False
        self._events: deque = deque()
        self._ready = threading.Condition()
        self._sink = sink if sink is not None else self._enqueue
        self._wake = wake

    def cancel(self) -> None:
        """Stop this request: a waiting one never starts, a decoding one frees its row at the next frame."""
        if not self.closed:
            self.cancelled = True
            self._wake()

    def push(self, audio: np.ndarray) -> None:
        if self.closed or self.cancelled or not len(audio):
            return
        if self.stats["first_audio_s"] is None:
            self.stats["first_audio_s"] = time.perf_counter() - self.submitted
        self.stats["audio_samples"] += len(audio)
        self._sink(audio)

    def close(self, error: BaseException | None = None) -> None:
        """Send the end marker (once)."""
        if not self.closed:
            self.closed = True
            self._sink(error)

    def _enqueue(self, event) -> None:
        with self._ready:
            self._events.append(event)
            self._ready.notify()

    def __iter__(self) -> Iterator[np.ndarray]:
        """Audio pieces as they come (only for jobs submitted without a sink); raises on failure."""
        while True:
            with self._ready:
                while not self._events:
                    self._ready.wait()
                event = self._events.popleft()
            if event is None:
                return
            if isinstance(event, BaseException):
                raise event
            yield event


@dataclass
class SlotRow:
    """A text chunk decoding in a slot: its job and which of the job's chunks it is."""

    job: Job
    index: int


class BatchScheduler:
    """Continuous batching over one SlotDecoder, on one thread (see the module docstring).

    max_batch: slots decoded together; max_queue: requests waiting for a slot before
    `submit` raises ServerBusy; max_prompt_tokens: prompt tokens a chunk may take (sizes
    the cache); limits: how much one request may ask for (typed and spoken characters, audio
    seconds; default the speech server's); first_frames / frames_per_piece:
    frames per streamed piece (first, then the rest), as `TTSEngine.stream`; idle_unload_s:
    after this long with nothing to decode the thread unloads the model (`TTSEngine.unload`:
    the GPU is freed) and reloads it when the next request arrives (None: never).
    """

    def __init__(self, engine: TTSEngine, max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, limits: RequestLimits = SERVER_LIMITS,
                 first_frames: int = FIRST_PIECE_FRAMES, frames_per_piece: int = PIECE_FRAMES,
                 idle_unload_s: float | None = None):
        if engine.decoder != "fast":
            raise ValueError("the scheduler needs the fast decode path (TTSEngine(decoder='fast'))")
        if max_batch < 1 or max_queue < 0:
            raise ValueError("max_batch must be >= 1 and max_queue >= 0")
        self.engine = engine
        self.layout = engine.layout
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.limits = limits
        self.first_frames = first_frames
        self.frames_per_piece = frames_per_piece
        self.max_len = cache_length(max_prompt_tokens, MAX_NEW_TOKENS_CAP)
        self.decoder: SlotDecoder | None = self._new_decoder()
        self.idle_unload_s = idle_unload_s
        self._last_busy = time.monotonic()
        self._unload_asked = False
        self._unloaded = threading.Event()  # set while the model is unloaded
        self.warmup_s: float | None = None
        self._cond = threading.Condition()
        self._waiting: deque[tuple[Job, int]] = deque()  # (job, chunk index); continuations at the front
        self._rows: dict[int, SlotRow] = {}  # slot -> row; touched by the scheduler thread only
        self._closing = False  # no new requests
        self._stopping = False  # end the loop; fail what is left
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._tokens_total = 0
        self._audio_samples = 0
        self._peak_rows = 0  # the most rows one decode step has run
        self._rate: deque[tuple[float, int]] = deque()  # (time, tokens) per frame, last RATE_WINDOW_S

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start the decode thread; returns after its warm-up (compilation when enabled)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="rumik-scheduler", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise EngineFailed(f"warm-up failed: {self._error!r}") from self._error

    def prepare(self, req: SynthesisRequest, abandoned: threading.Event | None = None) -> list[Chunk]:
        """Validate a request and plan its chunks (CPU work: normalise, tokenise, plan; any
        thread); PromptError says what to fix. Once `abandoned` is set (its client went away)
        it stops at the next chunk with JobCancelled, so dropped requests cost no more CPU."""
        chunks = []
        for chunk in self.engine.plan(req, self.limits):
            if abandoned is not None and abandoned.is_set():
                raise JobCancelled("abandoned while it was being prepared")
            ids = self.engine.prompt_ids(chunk)
            row = self.engine.row_params(chunk)
            need = len(ids) + row.max_new_tokens
            if need >= self.max_len:
                raise PromptError(
                    f"This text needs {need:,} decode-cache positions (a {len(ids):,}-token prompt plus up to "
                    f"{row.max_new_tokens:,} new tokens); the server holds {self.max_len - 1:,}. Shorten the "
                    "sentence or the description, lower max_seconds, or start the server with a larger "
                    "--max-prompt-tokens.")
            chunks.append(Chunk(chunk, ids, row))
        return chunks

    def check_admission(self) -> None:
        """Raise EngineFailed, ShuttingDown or ServerBusy (queue full) now: cheap, so a server
        can refuse before it spends CPU on preparing the request."""
        with self._cond:
            self._check_admission()

    def _check_admission(self) -> None:
        if self._error is not None:
            raise EngineFailed(f"the decode loop stopped: {self._error!r}")
        if self._closing:
            raise ShuttingDown("The server is shutting down and takes no new requests; retry on another instance.")
        if self._queued() >= self.max_queue:
            raise ServerBusy(f"The server is busy: {self.max_queue} requests are already waiting; retry shortly.")

    def submit(self, req: SynthesisRequest, sink: Callable[[object], None] | None = None,
               chunks: list[Chunk] | None = None) -> Job:
        """Queue a request (`chunks`: its `prepare(req)`, when done already, e.g. in a worker
        thread); raises PromptError, ServerBusy (queue full), ShuttingDown, EngineFailed."""
        self.check_admission()
        chunks = chunks if chunks is not None else self.prepare(req)
        assembler = self.engine.assembler([c.request for c in chunks], None, self.first_frames, self.frames_per_piece)
        with self._cond:
            self._check_admission()
            job = Job(req, chunks, assembler, sink, self._wake)
            self._waiting.append((job, 0))
            self._cond.notify()
        return job

    def unload(self, timeout: float = 60.0) -> bool:
        """Unload the model now if nothing is decoding or waiting (the decode thread does it
        between frames); True once it is unloaded, False if requests are running."""
        with self._cond:
            if self._rows or self._waiting:
                return False
            self._unload_asked = True
            self._cond.notify()
        return self._unloaded.wait(timeout)

    @property
    def loaded(self) -> bool:
        return not self._unloaded.is_set()

    def stats(self) -> ServingStats:
        now = time.perf_counter()
        with self._cond:
            queued = self._queued()
            recent = [(when, tokens) for when, tokens in self._rate if now - when <= RATE_WINDOW_S]
        span = now - recent[0][0] if len(recent) > 1 else 0.0
        rate = sum(tokens for _, tokens in recent[1:]) / span if span > 0 else 0.0
        return ServingStats(queue_depth=queued, active=len(self._rows), peak_active=self._peak_rows,
                            max_batch=self.max_batch, tokens_total=self._tokens_total, tokens_per_second=rate,
                            audio_seconds_total=self._audio_samples / self.engine.sample_rate,
                            healthy=self._error is None, draining=self._closing, loaded=self.loaded)

    def close(self) -> None:
        """Begin shutdown: refuse new requests and fail the ones not yet started with
        ShuttingDown; requests already producing audio run to their end."""
        with self._cond:
            self._closing = True
            keep = deque()
            for job, index in self._waiting:
                if index == 0:
                    job.close(ShuttingDown("The server is shutting down; this request was not started. Retry."))
                else:
                    keep.append((job, index))
            self._waiting = keep

    def stop(self, timeout: float = 30.0) -> None:
        """close(), wait up to `timeout` s for running requests, then fail the rest and end the thread."""
        self.close()
        deadline = time.monotonic() + timeout
        while (self._rows or self._waiting) and time.monotonic() < deadline and self._alive():
            time.sleep(STOP_POLL_S)
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ the decode thread

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _queued(self) -> int:
        return sum(1 for job, index in self._waiting if index == 0 and not job.cancelled)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        try:
            with torch.no_grad():
                self.warmup_s = self.decoder.warmup()
                log.info("speech scheduler: %d slots x %d cache positions, decode step %s in %.1f s", self.max_batch,
                         self.max_len, "compiled" if self.decoder.compiled else "warmed up", self.warmup_s)
                self._started.set()
                while self._admit():
                    self._peak_rows = max(self._peak_rows, len(self._rows))
                    self._deliver(self.decoder.run_frame())
        except BaseException as exc:  # noqa: BLE001 - every waiting client gets the error, the log the traceback
            log.exception("speech scheduler: the decode loop failed")
            self._error = exc
        finally:
            self._fail_all(self._error)
            self._started.set()

    def _admit(self) -> bool:
        """Between frames: drop cancelled rows, prefill waiting chunks into free slots.

        Blocks while there is nothing to do; returns False when the loop should end.
        """
        while True:
            for slot in [slot for slot, row in self._rows.items() if row.job.cancelled]:
                self._release(slot).job.close(JobCancelled("cancelled"))
            with self._cond:
                unload = self._wait_for_work()
                if self._stopping:
                    return False
                for job, _ in [w for w in self._waiting if w[0].cancelled]:  # gave up while waiting
                    job.close(JobCancelled("cancelled"))
                self._waiting = deque(w for w in self._waiting if not w[0].cancelled)
            if unload:
                self._unload()
                continue
            if self._waiting and self.decoder is None:
                self._reload()
            with self._cond:
                starting = []
                while self._waiting and len(starting) < len(self.decoder.free):
                    starting.append(self._waiting.popleft())
            for job, index in starting:  # prefill outside the lock: submit() never waits on compute
                self._start(job, index)
            if self._rows:
                self._last_busy = time.monotonic()
                return True

    def _wait_for_work(self) -> bool:
        """Under the lock: block while there is nothing to do; True when it is time to unload."""
        while not self._rows and not self._waiting and not self._stopping:
            if self.decoder is not None and self._unload_asked:
                return True
            idle_left = None
            if self.decoder is not None and self.idle_unload_s is not None:
                idle_left = self._last_busy + self.idle_unload_s - time.monotonic()
                if idle_left <= 0:
                    return True
            self._cond.wait(timeout=idle_left)
        return False

    def _new_decoder(self) -> SlotDecoder:
        return SlotDecoder(self.engine.model, self.engine.head, self.max_batch, self.max_len,
                           pad_id=self.engine.pad_id, compile=self.engine.compile,
                           bank=self.engine.bank)

    def _unload(self) -> None:
        idle = time.monotonic() - self._last_busy
        self.decoder = None  # its static cache and compiled step go with it
        freed = self.engine.unload()
        self._unload_asked = False
        self._unloaded.set()
        log.info("speech scheduler: model unloaded after %.0f s idle (%s of weights freed on %s)", idle,
                 human_bytes(freed), self.engine.device)

    def _reload(self) -> None:
        start = time.perf_counter()
        self.engine.reload()
        self.decoder = self._new_decoder()
        self.decoder.warmup()
        self._unloaded.clear()
        log.info("speech scheduler: model reloaded for a request in %.1f s", time.perf_counter() - start)

    def _start(self, job: Job, index: int) -> None:
        chunk = job.chunks[index]
        bank = self.engine.bank
        if self.decoder.bank is not bank and not self.decoder.adapters:  # a library attached since we began
            self.decoder.use_bank(bank)
        try:
            slot = self.decoder.add([chunk.prompt_ids], [chunk.row])[0]  # alone: batch-invariant prefill
        except AdapterBankFull as exc:  # every adapter slot is busy: a 503 with Retry-After, like a full queue
            job.close(ServerBusy(str(exc)))
            return
        except ValueError as exc:  # VoiceError too: a library voice deleted or damaged since it was checked
            job.close(PromptError(str(exc)))
            return
        if job.stats["queued_s"] is None:
            job.stats["queued_s"] = time.perf_counter() - job.submitted
        job.assembler.start_chunk()
        self._rows[slot] = SlotRow(job, index)

    def _deliver(self, frame: FrameResult) -> None:
        """Each row's tokens to its assembler, decoded audio out, rows that ended finished."""
        tokens = frame.tokens.tolist()
        alive = frame.alive.tolist()
        reasons = frame.reason.tolist()
        produced = 0
        for slot, row in list(self._rows.items()):
            new = [t for t in tokens[slot] if t >= 0]
            produced += len(new)
            for token in new:
                if row.job.assembler.push(token):
                    self._emit(row.job, row.job.assembler.piece())
            if not alive[slot]:
                self._finish_chunk(slot, FINISH_NAMES.get(reasons[slot], FINISH_MAX_TOKENS))
        self._tokens_total += produced
        with self._cond:
            now = time.perf_counter()
            self._rate.append((now, produced))
            while self._rate and now - self._rate[0][0] > RATE_WINDOW_S:
                self._rate.popleft()

    def _emit(self, job: Job, audio: np.ndarray) -> None:
        self._audio_samples += len(audio)
        job.push(audio)

    def _release(self, slot: int) -> SlotRow:
        self.decoder.release(slot)
        return self._rows.pop(slot)

    def _finish_chunk(self, slot: int, reason: str) -> None:
        row = self._release(slot)
        job = row.job
        self._emit(job, job.assembler.end_chunk(reason))
        if row.index + 1 < len(job.chunks) and not job.cancelled:
            with self._cond:
                self._waiting.appendleft((job, row.index + 1))  # ahead of new requests: it is mid-stream
            return
        self._emit(job, job.assembler.finish())
        job.close(JobCancelled("cancelled") if job.cancelled else None)

    def _fail_all(self, error: BaseException | None) -> None:
        """End every job still here: with the loop's error, or ShuttingDown after stop()."""
        reason = (EngineFailed(f"the decode loop stopped: {error!r}") if error is not None
                  else ShuttingDown("The server shut down before this request finished."))
        with self._cond:
            jobs = [row.job for row in self._rows.values()] + [job for job, _ in self._waiting]
            self._waiting.clear()
        for slot in list(self._rows):
            self._rows.pop(slot)
        if self.decoder is not None:  # None after an unload: nothing to reset
            self.decoder.reset()
        for job in jobs:
            job.close(reason)
