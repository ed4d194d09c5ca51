"""Long jobs over HTTP: a speech request made in the background, chunk by chunk, that survives a restart.

    POST   /v1/audio/jobs                 a /v1/audio/speech body (up to JobLimits.max_chars characters of
                                          input) -> 201 {"id": "job_...", "status": "queued", "progress": ...}
    GET    /v1/audio/jobs                 this API key's jobs, newest first
    GET    /v1/audio/jobs/{id}            status (queued, running, done, failed, cancelled), progress in
                                          chunks and seconds, the output format and rate, error
    GET    /v1/audio/jobs/{id}/events     the same object as server-sent events, on every change, until it
                                          is finished (`event: progress`, then `event: done|failed|cancelled`)
    GET    /v1/audio/jobs/{id}/audio      a done job's audio, in its response_format and sample_rate
    DELETE /v1/audio/jobs/{id}            cancel an unfinished job (its batch rows are freed at once), or
                                          delete a finished one and its audio

    curl -s localhost:8000/v1/audio/jobs -H "Authorization: Bearer $KEY" \
        -d '{"model": "rumik-oss-1", "input": "...a chapter...", "voice": "Ira", "seed": 7}'

The body is checked as /v1/audio/speech checks it (`openai.schema.speech_job`: every field, the
key's lexicons), with the job's text bounds instead of a request's; plain text only (a
dialogue, SSML, `stream_format: "sse"` or `spans` is one 400 naming the route that takes it), in
a format that streams (not flac, which is written whole).
Jobs belong to the API key that made them (`RequestGate`'s owner id): another key gets 404.
The work, the bounds and what survives a restart: `rumik_app.serve.jobs.runner` and `.store`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from rumik_app.engine.planning import plan_request
from rumik_app.prompt import PromptError
from rumik_app.request import RequestLimits, SynthesisRequest
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import make_encoder
from rumik_app.serve.errors import ApiError, prompt_error
from rumik_app.serve.jobs.runner import ACTIVE, JobRunner
from rumik_app.serve.jobs.store import DONE, JobLimits, JobRecord
from rumik_app.serve.lexicons import owner_of
from rumik_app.serve.openai.schema import SpeechRequest, check_model, speech_job
from rumik_app.serve.protocol import SEED_HEADER

JOBS_PATH = "/v1/audio/jobs"
PLAIN_TEXT_ONLY = ("A job takes plain text: send a dialogue or SSML to /v1/audio/speech (its parts are planned "
                   "together there), and drop stream_format \"sse\", spans and timestamps (a job's audio is fetched "
                   "whole from GET /v1/audio/jobs/{id}/audio).")

# FLAC is written whole at the end (its header carries the length): hours of a job's audio would be
# held in memory for one download, so a job is made in a format that streams.
WHOLE_FILE_FORMATS = ("flac",)
WHOLE_FILE = ("A job's audio is sent as it is read from its chunks, and flac is written whole (its header holds "
              "the length): choose wav, pcm, mp3, opus, aac, ulaw or alaw, and convert the file afterwards.")

router = APIRouter()


class _JobBounds:
    """The adapter as a job's request builder sees it: its voices, layout and token lengths, with
    the job's text bounds instead of a request's."""

    def __init__(self, adapter, limits: RequestLimits):
        self._adapter, self.limits = adapter, limits

    def __getattr__(self, name: str):
        return getattr(self._adapter, name)


def plan_job(body: SpeechRequest, ctx: ServeContext, limits: JobLimits,
             owner: str) -> tuple[SynthesisRequest, str, int | None, list[SynthesisRequest]]:
    """(request, response_format, sample_rate or None, planned chunks) of a job body; ApiError
    names the field (CPU work: normalising and planning a chapter)."""
    if body.dialogue or body.spans or body.timestamps or body.stream_format == "sse":
        raise ApiError(400, PLAIN_TEXT_ONLY, param="input", code="unsupported_job")
    bounded = dataclasses.replace(ctx, adapter=_JobBounds(ctx.adapter, limits.request_limits))
    job = speech_job(body, bounded, owner)
    if job.parts is not None:
        raise ApiError(400, PLAIN_TEXT_ONLY, param="input", code="unsupported_job")
    if job.response_format in WHOLE_FILE_FORMATS:
        raise ApiError(400, WHOLE_FILE, param="response_format", code="unsupported_job")
    try:
        chunks = plan_request(job.request, ctx.adapter.layout, limits.request_limits)
    except PromptError as exc:
        raise prompt_error(exc) from None
    return job.request, job.response_format, job.sample_rate, chunks


def _runner(request: Request) -> JobRunner:
    return request.app.state.jobs


@router.post(JOBS_PATH)
async def create_job(body: SpeechRequest, request: Request) -> JSONResponse:
    ctx: ServeContext = request.app.state.ctx
    runner, owner = _runner(request), owner_of(request)
    runner.check_enabled()
    check_model(body.model, ctx.accepted)
    req, fmt, rate, chunks = await off_loop(plan_job, body, ctx, runner.limits, owner)
    record = await runner.create(owner, req, chunks, fmt, rate, ctx.model_name)
    return JSONResponse(runner.describe(record), status_code=201,
                        headers={"Location": f"{JOBS_PATH}/{record.id}", SEED_HEADER: str(req.seed)})


@router.get(JOBS_PATH)
async def list_jobs(request: Request) -> dict:
    runner = _runner(request)
    return {"object": "list", "data": [runner.describe(r) for r in await runner.list(owner_of(request))]}


@router.get(JOBS_PATH + "/{job_id}")
async def get_job(request: Request, job_id: str) -> dict:
    runner = _runner(request)
    return runner.describe(await runner.get(owner_of(request), job_id))


@router.delete(JOBS_PATH + "/{job_id}")
async def cancel_job(request: Request, job_id: str) -> dict:
    return await _runner(request).cancel(owner_of(request), job_id)


@router.get(JOBS_PATH + "/{job_id}/events")
async def job_events(request: Request, job_id: str) -> StreamingResponse:
    runner, owner = _runner(request), owner_of(request)
    await runner.get(owner, job_id)  # 404 before the stream starts

    async def events():
        async for snapshot in runner.watch(owner, job_id):
            if snapshot is None:
                yield b": keep-alive\n\n"
                continue
            kind = "progress" if snapshot["status"] in ACTIVE else snapshot["status"]
            yield f"event: {kind}\ndata: {json.dumps(snapshot)}\n\n".encode()

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


@router.get(JOBS_PATH + "/{job_id}/audio")
async def job_audio(request: Request, job_id: str) -> StreamingResponse:
    runner = _runner(request)
    record = await runner.get(owner_of(request), job_id)
    if record.status != DONE:
        progress = record.chunks_total and f" ({len(record.done)} of {record.chunks_total} chunks made)"
        raise ApiError(409, f"Job {job_id} is {record.status}{progress if record.status in ACTIVE else ''}; its "
                            f"audio is ready when its status is done (GET {JOBS_PATH}/{job_id}/events reports "
                            "progress).", code="job_not_done")
    if not await asyncio.to_thread(_files_present, runner, record):
        raise ApiError(410, f"Job {job_id}'s audio is no longer on the server; create the job again.",
                       code="job_audio_gone")
    fmt, rate = record.spec["response_format"], record.spec["sample_rate"]
    encoder = make_encoder(fmt, record.spec["rate"], rate)
    headers = {SEED_HEADER: str(record.spec["seed"]), "Cache-Control": "no-store",
               "Content-Disposition": f'attachment; filename="{job_id}.{fmt}"'}
    return StreamingResponse(_encoded(runner, record, encoder), media_type=encoder.media_type, headers=headers)


def _files_present(runner: JobRunner, record: JobRecord) -> bool:
    return all(runner.store.chunk_path(record, index).is_file() for index in range(record.chunks_total))


async def _encoded(runner: JobRunner, record: JobRecord, encoder) -> AsyncIterator[bytes]:
    """The encoded file, a chunk at a time: reads and encoding run on threads, and the encoder
    (an AAC encoder's ffmpeg) is closed when the response ends, at once when the client hangs up."""
    blocks = runner.audio(record)
    try:
        if data := encoder.header():
            yield data
        while (block := await asyncio.to_thread(next, blocks, None)) is not None:
            if block.size and (data := await asyncio.to_thread(encoder.encode, block)):
                yield data
        if data := await asyncio.to_thread(encoder.finish):
            yield data
    finally:
        encoder.close()
        with contextlib.suppress(ValueError):  # a read still running on its thread: it ends with the files
            blocks.close()
