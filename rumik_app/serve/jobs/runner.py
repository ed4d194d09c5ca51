"""`JobRunner`: long jobs made chunk by chunk on the server's batch rows, stored as they finish, resumed.

    runner = JobRunner(adapter, Path(data_dir) / "jobs")     # create_app; None: jobs are off (501)
    await runner.start()                     # sweep old jobs, resume unfinished ones (lifespan start)
    record = await runner.create(owner, req, chunks, "mp3", None, "rumik-oss-1")   # chunks: plan_request(req)
    runner.describe(record)                  # the job object the routes answer with
    async for snapshot in runner.watch(owner, record.id): ...   # on every change (None: keep-alive)
    await runner.cancel(owner, record.id)    # its rows are freed at once
    await runner.stop()                      # chunks in progress are dropped, made again after a restart

A job is its request's planned chunks (`rumik_app.engine.planning.plan_request`: spoken text,
chunk i with seed + i), each sent to the adapter as a request of its own, exactly as the
engine plans it, so a chunk's samples depend on nothing but the chunk: not on which other
chunks or requests share the batch (the scheduler is batch-invariant), nor on when it runs,
nor on a restart in between. Each finished chunk is stored at once (`JobStore.save_chunk`:
file, then row); the job's audio is its chunks joined with the engine's crossfade
(`CrossfadeStream`, equal to `crossfade_concat`), the same join a streamed request gets, so
the audio of a job that was killed and resumed equals an uninterrupted run's sample for
sample (and, for a voice that is not watermarked, the same request's `/v1/audio/speech` audio
as 16-bit PCM). A library voice's audio is watermarked per chunk here.

Scheduling: unfinished jobs in creation order; free job rows (`JobLimits.rows`, half the
server's --max-batch by default) take the next unstarted chunk of the oldest job, so one long
job uses several rows at once and interactive requests keep the rest. A full queue
(ServerBusy) is waited out; shutting down (or a dead engine) stops taking chunks, leaving the
jobs to resume after the restart; an error of the request itself (PromptError, a watermark
that cannot load, anything else) fails the job with one message. Cancelling a job cancels its
chunks' streams, which frees their batch rows at the next frame, and removes its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rumik_app.audio import CrossfadeStream, chunk_spans
from rumik_app.engine.serving import EngineFailed, ServerBusy, ShuttingDown
from rumik_app.request import SynthesisRequest
from rumik_app.serve.errors import ApiError, engine_error
from rumik_app.serve.jobs.store import (
    ACTIVE,
    CANCELLED,
    DB_NAME,
    DONE,
    FAILED,
    FINAL,
    QUEUED,
    RUNNING,
    SAMPLE_BYTES,
    JobLimits,
    JobRecord,
    JobStore,
)
from rumik_app.serve.protocol import SpeechAdapter
from rumik_app.text.languages import expected_seconds

log = logging.getLogger(__name__)
DEFAULT_LIMITS = JobLimits()

KEEPALIVE_S = 15.0  # an idle events stream sends a comment this often (proxies close silent ones)
JOBS_OFF = ("Long jobs are off on this server: start it with --data-dir DIR, where jobs are kept (they survive "
            "restarts).")
JOBS_BROKEN = ("Long jobs are off: the job store {path} could not be opened ({reason}). The rest of the server "
               "works; move the file aside (or restore it from a backup) and restart to turn jobs back on.")


def not_found(job_id: str) -> ApiError:
    return ApiError(404, f"No job {job_id!r} for this API key; GET /v1/audio/jobs lists yours.", param="id",
                    code="job_not_found")


def chunk_spec(chunk: SynthesisRequest) -> dict:
    """A planned chunk as JSON (its text is spoken text: no lexicons, not normalised again)."""
    values = dataclasses.asdict(chunk)
    values.pop("lexicons")
    return values


@dataclass
class ActiveJob:
    """An unfinished job in memory: its record (done chunks filled in as they finish), its chunk
    requests, the chunks decoding now, and whether it is ending (no new chunks start)."""

    record: JobRecord
    chunks: list[SynthesisRequest]
    running: dict[int, asyncio.Task] = field(default_factory=dict)
    ending: bool = False

    def next_chunk(self) -> int | None:
        """The first chunk neither stored nor decoding (None: none left)."""
        if self.ending:
            return None
        done, running = self.record.done, self.running
        return next((i for i in range(len(self.chunks)) if i not in done and i not in running), None)


class JobRunner:
    """Long jobs over one adapter (see the module docstring). root: where the store lives
    (None: jobs are off; every call but `start`/`stop` is ApiError 501)."""

    def __init__(self, adapter: SpeechAdapter, root: str | Path | None, limits: JobLimits = DEFAULT_LIMITS):
        self.adapter = adapter
        self.root = Path(root) if root is not None else None
        self.limits = limits
        self.store: JobStore | None = None
        self.jobs: dict[str, ActiveJob] = {}  # unfinished jobs, oldest first
        self.busy = 0  # job rows in use
        self._closing = False
        self._wake = asyncio.Event()
        self._tick = asyncio.Event()  # set (and replaced) on every change: watchers wake
        self._loops: list[asyncio.Task] = []
        self.broken: str | None = None  # why the store could not be opened: jobs are off, the server runs

    @property
    def rows(self) -> int:
        """Engine rows jobs may take together."""
        return self.limits.rows or max(1, int(self.adapter.max_batch) // 2)

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        """Open the store, remove expired jobs, resume unfinished ones (from their first unstored chunk)."""
        if self.root is None:
            return
        try:
            store = await asyncio.to_thread(JobStore, self.root)
            removed = await asyncio.to_thread(store.sweep, self.limits.retention_s)
            unfinished = await asyncio.to_thread(store.unfinished)
        except (sqlite3.Error, OSError) as exc:  # one broken store turns off its feature, not the server
            self.broken = JOBS_BROKEN.format(path=self.root / DB_NAME, reason=exc)
            log.error("jobs: %s", self.broken)
            return
        self.store = store
        for record in unfinished:
            try:
                chunks = [SynthesisRequest(**values) for values in record.spec["chunks"]]
            except Exception as exc:  # noqa: BLE001 - a spec this version cannot read fails alone
                await asyncio.to_thread(self.store.finish, record.id, FAILED,
                                        {"message": f"The stored job could not be read back: {exc}",
                                         "code": "job_unreadable"})
                continue
            if len(record.done) == record.chunks_total:  # stopped between its last chunk and its end
                await asyncio.to_thread(self.store.finish, record.id, DONE)
                continue
            self.jobs[record.id] = ActiveJob(record, chunks)
        if removed or self.jobs:
            log.info("jobs: removed %d expired, resuming %d unfinished (%d of their chunks already stored)",
                     removed, len(self.jobs), sum(len(job.record.done) for job in self.jobs.values()))
        self._loops = [asyncio.ensure_future(self._dispatch()), asyncio.ensure_future(self._sweep_loop())]
        self._wake.set()

    async def stop(self) -> None:
        """Stop taking chunks and drop the ones decoding (their rows are freed; they are made again
        after a restart). Stored chunks stay."""
        self._closing = True
        tasks = [*self._loops, *(task for job in self.jobs.values() for task in job.running.values())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def check_enabled(self) -> JobStore:
        """The store; ApiError 501 (naming --data-dir) when jobs are off."""
        if self.broken is not None:
            raise ApiError(503, self.broken, code="jobs_unavailable")
        if self.store is None:
            raise ApiError(501, JOBS_OFF, code="jobs_disabled")
        return self.store

    def _changed(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    # ------------------------------------------------------------------ what the routes call

    async def create(self, owner: str, request: SynthesisRequest, chunks: Sequence[SynthesisRequest],
                     response_format: str, sample_rate: int | None, model: str) -> JobRecord:
        """Store a new job of `request`'s planned `chunks` (ApiError 400 past `owner`'s bounds) and queue it."""
        from rumik_app.engine.stream import CROSSFADE_SECONDS  # torch: the adapter's engine has loaded it

        store = self.check_enabled()
        rate = int(self.adapter.sample_rate)
        tokens_per_second = self.adapter.layout.tokens_per_second
        reserved = int(sum(chunk.max_new_tokens for chunk in chunks) / tokens_per_second * rate) * SAMPLE_BYTES
        spec = {"chunks": [chunk_spec(chunk) for chunk in chunks], "response_format": response_format,
                "sample_rate": sample_rate, "rate": rate, "fade": int(CROSSFADE_SECONDS * rate), "model": model,
                "seed": request.seed, "voice": request.voice, "characters": len(request.text),
                "expected_seconds": sum(expected_seconds(c.text, c.language, c.pace) for c in chunks)}
        job_id = "job_" + secrets.token_hex(12)
        record = await asyncio.to_thread(store.create, owner, job_id, spec, len(chunks), reserved, self.limits)
        self.jobs[job_id] = ActiveJob(record, list(chunks))
        self._wake.set()
        self._changed()
        return record

    async def get(self, owner: str, job_id: str) -> JobRecord:
        """`owner`'s job (ApiError 404 for anyone else's, or none)."""
        store = self.check_enabled()
        job = self.jobs.get(job_id)
        if job is not None:
            if job.record.owner != owner:
                raise not_found(job_id)
            return job.record
        record = await asyncio.to_thread(store.get, owner, job_id)
        if record is None:
            raise not_found(job_id)
        return record

    async def list(self, owner: str) -> list[JobRecord]:
        records = await asyncio.to_thread(self.check_enabled().list, owner)
        return [self.jobs[r.id].record if r.id in self.jobs else r for r in records]

    async def cancel(self, owner: str, job_id: str) -> dict:
        """Cancel `owner`'s unfinished job (its rows freed, its chunks removed; the record stays
        until it expires), or delete a finished one with its audio."""
        record = await self.get(owner, job_id)
        job = self.jobs.get(job_id)
        if job is not None and not job.ending:
            await self._end(job, CANCELLED)
            return self.describe(job.record)
        if record.status in FINAL:
            await asyncio.to_thread(self.check_enabled().delete, owner, job_id)
            return {"id": job_id, "object": "audio.job", "deleted": True}
        return self.describe(record)

    def describe(self, record: JobRecord) -> dict:
        """The job object: status, progress in chunks and seconds, output, times (Unix s), error."""
        spec, rate = record.spec, record.spec["rate"]
        made = sum(record.done.values())
        duration = None
        if record.status == DONE:  # the joined clip: each seam overlaps its crossfade
            spans = chunk_spans([record.done[i] for i in range(record.chunks_total)], spec["fade"])
            duration = round(spans[-1][1] / rate, 3)
        expires = record.finished_at + self.limits.retention_s if record.finished_at else None
        return {"id": record.id, "object": "audio.job", "status": record.status, "model": spec["model"],
                "created_at": int(record.created_at), "finished_at": _int(record.finished_at),
                "expires_at": _int(expires), "response_format": spec["response_format"],
                "sample_rate": spec["sample_rate"] or rate, "seed": spec["seed"], "voice": spec["voice"],
                "characters": spec["characters"], "duration": duration,
                "progress": {"chunks_done": len(record.done), "chunks_total": record.chunks_total,
                             "audio_seconds": round(made / rate, 3),
                             "expected_seconds": round(spec["expected_seconds"], 1)},
                "error": record.error}

    async def watch(self, owner: str, job_id: str) -> AsyncIterator[dict | None]:
        """The job object now and after every change, until it is finished (or deleted, or the
        server is shutting down); None after KEEPALIVE_S without a change."""
        last = None
        while True:
            tick = self._tick
            try:
                snapshot = self.describe(await self.get(owner, job_id))
            except ApiError:
                return
            if snapshot != last:
                yield snapshot
                last = snapshot
            if snapshot["status"] in FINAL or self._closing or self.adapter.stats().draining:
                return  # finished, or the server is stopping (the job resumes after its restart)
            try:
                await asyncio.wait_for(tick.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield None

    def audio(self, record: JobRecord) -> Iterator[np.ndarray]:
        """A done job's audio (float32 at the engine's rate), chunk by chunk, joined with the engine's
        crossfade (blocking reads: iterate off the event loop). OSError if a file is gone."""
        store = self.check_enabled()
        joiner = CrossfadeStream(record.spec["fade"])
        for index in range(record.chunks_total):
            joiner.start_chunk()
            yield joiner.push(store.read_chunk(record, index))
            yield joiner.end_chunk()
        yield joiner.finish()

    # ------------------------------------------------------------------ the work

    async def _dispatch(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while not self._closing and self.busy < self.rows and (pick := self._next()) is not None:
                job, index = pick
                self.busy += 1
                if job.record.status == QUEUED:
                    job.record.status = RUNNING
                    self._changed()
                job.running[index] = asyncio.ensure_future(self._run_chunk(job, index))

    def _next(self) -> tuple[ActiveJob, int] | None:
        for job in self.jobs.values():
            index = job.next_chunk()
            if index is not None:
                return job, index
        return None

    async def _run_chunk(self, job: ActiveJob, index: int) -> None:
        held = True

        def release_row() -> None:  # the engine row is free once the samples are here; storing them is I/O
            nonlocal held
            if held:
                held = False
                self.busy -= 1
                self._wake.set()

        try:
            samples = await self._synthesize(job.chunks[index])
            release_row()
            if await asyncio.to_thread(self.store.save_chunk, job.record, index, samples):
                job.record.done[index] = len(samples)
                if len(job.record.done) == job.record.chunks_total:
                    await self._end(job, DONE)
        except asyncio.CancelledError:
            raise
        except (ShuttingDown, EngineFailed) as exc:  # the server is going down: resume after its restart
            log.warning("jobs: not taking more chunks (%s); unfinished jobs resume after a restart", exc)
            self._closing = True
        except Exception as exc:  # noqa: BLE001 - the job fails with one message; the server goes on
            error = engine_error(exc)
            await self._end(job, FAILED, {"message": error.message, "code": error.code})
        finally:
            job.running.pop(index, None)
            release_row()
            self._changed()

    async def _synthesize(self, chunk: SynthesisRequest) -> np.ndarray:
        """One chunk's samples through the adapter (waiting out a full queue)."""
        while True:
            try:
                pieces = []
                async with contextlib.aclosing(self.adapter.stream(chunk, {})) as stream:
                    async for piece in stream:
                        pieces.append(piece)
                return np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
            except ServerBusy as exc:
                await asyncio.sleep(exc.retry_after)

    async def _end(self, job: ActiveJob, status: str, error: dict | None = None) -> None:
        """Finish `job` as `status`: its other chunks are cancelled (rows freed), the store updated."""
        job.ending = True
        others = [task for task in job.running.values() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        try:
            await asyncio.to_thread(self.store.finish, job.record.id, status, error)
        except (OSError, sqlite3.Error):  # the job still ends here; a restart finds it from its stored chunks
            log.exception("jobs: could not store the end of %s", job.record.id)
        job.record.status, job.record.finished_at, job.record.error = status, time.time(), error
        if status != DONE:
            job.record.done = {}
        self.jobs.pop(job.record.id, None)
        self._changed()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.sweep_every_s)
            try:
                removed = await asyncio.to_thread(self.store.sweep, self.limits.retention_s)
            except (OSError, sqlite3.Error) as exc:  # retried at the next sweep
                log.warning("jobs: the sweep of old jobs failed: %s", exc)
                continue
            if removed:
                log.info("jobs: removed %d finished jobs older than %g h", removed, self.limits.retention_s / 3600)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


__all__ = ["ACTIVE", "FINAL", "JOBS_OFF", "JobRunner", "not_found"]
