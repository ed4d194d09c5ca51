"""OpenAI's speech routes: the router `rumik_app.serve.app` includes.

    POST /v1/audio/speech   SpeechRequest -> the audio, streamed (chunked) as the engine makes it,
                            or as OpenAI's SSE events (`stream_format: "sse"`); `x-rumik-seed`
                            holds the seed used, `x-rumik-sample-rate` the output rate;
                            `timestamps: true`: the words' times, as `speech.audio.words` SSE
                            events after each chunk's audio, or one JSON answer (`_with_spans`)
    GET  /v1/audio/voices   the voices, their aliases (--voice-map), tones, accents, paces, tags
    GET  /v1/models         the served model

A speech request is checked field by field (400 with OpenAI's error body), submitted to the
adapter, and answered once its first audio is ready, so queue-full (503 + Retry-After),
shutting-down (503) and engine errors still get a status code; the body then streams as the
engine produces audio. A client that hangs up while waiting or mid-stream cancels its
request, which frees its batch row.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from rumik_app.asgi import unless_disconnected
from rumik_app.prompt import ACCENTS, ALLOWED_TAGS, PACES, TONES, VOICE_NOTE
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import BLOCKING_FORMATS, RATE_HEADER, Encoder, encode_whole, make_encoder, media_type
from rumik_app.serve.errors import engine_error
from rumik_app.serve.lexicons import owner_of
from rumik_app.serve.openai.schema import SpeechJob, SpeechRequest, check_model, speech_job
from rumik_app.serve.protocol import SEED_HEADER
from rumik_app.serve.scripts import script_stream
from rumik_app.serve.words import StreamWords

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's status for "client closed the request" (logged only; nobody receives it)

router = APIRouter()


@router.post("/v1/audio/speech")
async def speech(body: SpeechRequest, request: Request) -> Response:
    ctx: ServeContext = request.app.state.ctx
    started = time.perf_counter()
    check_model(body.model, ctx.accepted)
    job = await off_loop(speech_job, body, ctx, owner_of(request))  # lexicons, SSML, a script's plan: CPU work
    info: dict = {}
    pieces = script_stream(ctx.adapter, job.parts, info) if job.parts else ctx.adapter.stream(job.request, info)
    try:
        first = await _first_piece(pieces, request)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one readable error body
        await pieces.aclose()
        raise engine_error(exc) from None
    if first is None:
        await pieces.aclose()
        ctx.metrics.error("client_disconnected")
        ctx.metrics.request_done(CLIENT_CLOSED, job.response_format)
        return Response(status_code=CLIENT_CLOSED)
    ctx.metrics.first_audio.observe(time.perf_counter() - started)
    # built once the request is admitted and sounding: a refused request costs no second reading of its text
    words = await off_loop(StreamWords, job.request, ctx.adapter, ctx.aligners, info) if job.timestamps else None
    if body.spans or (words is not None and not job.sse):
        return await _with_spans(ctx, job, first, pieces, info, request, started, words)
    encoder = make_encoder(job.response_format, ctx.adapter.sample_rate, job.sample_rate)  # ffmpeg starts at audio
    media = "text/event-stream" if job.sse else media_type(job.response_format, encoder.sample_rate)
    return StreamingResponse(_body(ctx, job, encoder, first, pieces, info, started, words), media_type=media,
                             headers={SEED_HEADER: str(job.request.seed), RATE_HEADER: str(encoder.sample_rate),
                                      "Cache-Control": "no-store"})


@router.get("/v1/audio/voices")
async def voices(request: Request) -> dict:
    ctx: ServeContext = request.app.state.ctx
    return {"voices": list(ctx.adapter.voices), "aliases": dict(ctx.voice_map or {}), "note": VOICE_NOTE,
            "tones": list(TONES), "accents": list(ACCENTS), "paces": list(PACES), "tags": list(ALLOWED_TAGS)}


@router.get("/v1/models")
async def models(request: Request) -> dict:
    ctx: ServeContext = request.app.state.ctx
    return {"object": "list", "data": [{"id": ctx.model_name, "object": "model", "created": request.app.state.created,
                                        "owned_by": "rumik-ai", "backend": ctx.adapter.backend}]}


async def _first_piece(pieces: AsyncIterator[np.ndarray], request: Request) -> np.ndarray | None:
    """The first audio piece; None if the client hung up first (the request is then cancelled)."""
    return await unless_disconnected(anext(pieces, np.zeros(0, dtype=np.float32)), request)


async def _body(ctx: ServeContext, job: SpeechJob, encoder: Encoder, first: np.ndarray,
                pieces: AsyncIterator[np.ndarray], info: dict, started: float,
                words: StreamWords | None = None) -> AsyncIterator[bytes]:
    """The response body: the encoded audio (or its SSE events, with each chunk's word events
    once it is aligned), piece by piece; the metrics at the end."""
    frame = _sse_event if job.sse else (lambda data: data)
    finished = False

    async def run(fn, *args):  # aac (a pipe to ffmpeg) and flac (the whole file at the end) block: off the loop
        return await off_loop(fn, *args) if encoder.fmt in BLOCKING_FORMATS else fn(*args)

    if words is not None:
        words.push(first)
    try:
        if data := encoder.header() + await run(encoder.encode, first):
            yield frame(data)
        async for piece in _pushed(pieces, words):
            for batch in await words.due() if words is not None else ():  # before the next chunk's audio ends
                yield _sse_words(batch)
            if data := await run(encoder.encode, piece):
                yield frame(data)
        if data := await run(encoder.finish):
            yield frame(data)
        for batch in await words.finish() if words is not None else ():
            yield _sse_words(batch)
        if job.sse:
            yield _sse_done(info, words)
        finished = True
        ctx.metrics.request_done(200, job.response_format, time.perf_counter() - started)
    except asyncio.CancelledError:
        ctx.metrics.error("client_disconnected")
        raise
    except Exception:
        log.exception("speech stream failed after the first audio; closing the connection")
        ctx.metrics.error("stream_failed")
        raise
    finally:
        encoder.close()  # an AAC encoder's ffmpeg stops with the response
        await pieces.aclose()
        if words is not None:
            words.cancel()
        if not finished:
            ctx.metrics.request_done(200, job.response_format)


async def _with_spans(ctx: ServeContext, job: SpeechJob, first: np.ndarray, pieces: AsyncIterator[np.ndarray],
                      info: dict, request: Request, started: float, words: StreamWords | None = None) -> Response:
    """`spans: true`: one JSON answer, {"audio": base64 of the whole file, "format", "sample_rate",
    "seed", "spans": [{index, speaker, voice, text, start, end, pause_after, seed}]}; with
    `timestamps: true` instead of spans, as ElevenLabs' /with-timestamps: "words" [{word, start,
    end, kind}], "segments" (each chunk's exact span), "aligner" and "missing" (why any words lack times)."""
    if words is not None:
        words.push(first)
    try:
        rest = await unless_disconnected(_gather(_pushed(pieces, words)), request)
        if words is not None and rest is not None and await unless_disconnected(words.finish(), request) is None:
            rest = None  # the client left while the words were aligned
    except Exception as exc:  # noqa: BLE001 - a later part failed: one readable error body, nothing sent yet
        raise engine_error(exc) from None
    finally:
        await pieces.aclose()
        if words is not None:
            words.cancel()
    if rest is None:
        ctx.metrics.error("client_disconnected")
        return Response(status_code=CLIENT_CLOSED)
    samples = np.concatenate([first, *rest]) if rest else first
    rate = ctx.adapter.sample_rate
    data = await off_loop(encode_whole, job.response_format, samples, rate, job.sample_rate)
    req = job.request
    spans = info.get("spans") or [{"index": 0, "speaker": None, "voice": req.voice, "text": req.text, "start": 0.0,
                                   "end": round(len(samples) / rate, 4), "pause_after": 0.0, "seed": req.seed}]
    ctx.metrics.request_done(200, job.response_format, time.perf_counter() - started)
    extra = words.timings().to_dict() if words is not None else {"spans": spans}
    return JSONResponse({"audio": base64.b64encode(data).decode("ascii"), "format": job.response_format,
                         "sample_rate": job.sample_rate or rate, "seed": req.seed, **extra},
                        headers={SEED_HEADER: str(req.seed), "Cache-Control": "no-store"})


async def _gather(pieces: AsyncIterator[np.ndarray]) -> list[np.ndarray]:
    return [piece async for piece in pieces]


async def _pushed(pieces: AsyncIterator[np.ndarray], words: StreamWords | None) -> AsyncIterator[np.ndarray]:
    """The pieces, each also handed to the word timer (when timestamps were asked for)."""
    async for piece in pieces:
        if words is not None:
            words.push(piece)
        yield piece


def _sse_words(words: list) -> bytes:
    """The words of one aligned chunk (rumik_app.serve.words), between the audio events."""
    event = {"type": "speech.audio.words", "words": [word.to_dict() for word in words]}
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def _sse_event(data: bytes) -> bytes:
    """OpenAI's `stream_format="sse"` audio event: base64 of the next bytes of the format."""
    event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
    return f"data: {json.dumps(event)}\n\n".encode()


def _sse_done(info: dict, words: StreamWords | None = None) -> bytes:
    prompt, output = int(info.get("prompt_tokens", 0)), int(info.get("tokens", 0))
    event = {"type": "speech.audio.done",
             "usage": {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}}
    if words is not None:  # every chunk's exact span, the aligner, and why any words lack times
        timings = words.timings()
        event.update(segments=timings.segments, aligner=timings.aligner, missing=timings.missing)
    return f"data: {json.dumps(event)}\n\n".encode()
