"""`POST /v1/audio/speech/batch`: many speech requests in one HTTP request, decoded together.

    POST /v1/audio/speech/batch  {"items": [SpeechRequest, ...]}          (1-64 items)
      -> 200 {"results": [{"index": 0, "audio": base64, "format": "wav", "sample_rate": 24000, "seed": 7,
                            "usage": {"input_tokens", "output_tokens", "total_tokens"}},
                           {"index": 1, "error": {"message", "type", "param", "code"}}, ...]}

    client.post("/v1/audio/speech/batch", json={"items": [{"model": "tiny", "input": "Hello.", "voice": "Ira",
                                                           "response_format": "pcm", "seed": 7}, ...]})

Each item is a whole `/v1/audio/speech` request (`rumik_app.serve.openai.schema.SpeechRequest`:
its own voice, seed, format, sample rate, controls, dialogue or SSML script) and is checked on
its own: a bad item gets its own error (OpenAI's error body, as the single route would answer
it) in its place, and never fails the others. The good items are submitted to the adapter at
once, so they take batch rows together and share decode steps (`GET /health`'s `peak_active`:
rows in one step). Each item's audio equals the same request sent alone (the engine is
batch-invariant), as one complete file (`rumik_app.serve.encoding.encode_whole`, as the single
route's `spans` answer: a WAV carries its real sizes, the other formats' bytes are the streamed
ones). `usage` is the item's, as the single route's SSE `speech.audio.done` event reports it;
`seed` the one used (drawn when none was given; send it back to reproduce the item);
`sample_rate` the output rate; a `spans: true` item also gets its `spans`.

Bounds, each refused for the whole batch with one 400 before any item takes a row: at most
MAX_ITEMS items (and at least one), MAX_TYPED_CHARS characters of `input` summed over the items,
MAX_AUDIO_SECONDS of audio summed over the items' budgets (each item's most audio: its
chunks' `max_seconds`, plus a script's pauses), and MAX_ANSWER_BYTES of answer (each item's
most audio in its format and rate, as base64). Each item is also bounded as a single request.
The answer comes whole (no streaming: `stream_format: "sse"` is an item's error). An item
that cannot get a row (full queue, shutting down) gets its own 503 error; retry just those. A
client that hangs up cancels every item, freeing their rows.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from rumik_app.asgi import unless_disconnected
from rumik_app.engine.planning import plan_request
from rumik_app.engine.script import plan_script
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import encode_whole, max_bytes_per_second, output_rate
from rumik_app.serve.errors import ApiError, engine_error
from rumik_app.serve.lexicons import owner_of
from rumik_app.serve.openai.schema import SpeechJob, SpeechRequest, check_model, speech_job, validation_error
from rumik_app.serve.scripts import script_stream

BATCH_PATH = "/v1/audio/speech/batch"
MAX_ITEMS = 64  # items per batch (vLLM-Omni's batch route takes 32)
# Characters of `input` summed over the items: 64 lines of 256 characters (a dubbing or
# e-learning script's lines), or four inputs at OpenAI's 4,096.
MAX_TYPED_CHARS = 16_384
# Audio the items may make, summed over their budgets: every item at the 30 s cap per chunk.
MAX_AUDIO_SECONDS = 64 * 30.0
MAX_ANSWER_BYTES = 64 * 2**20  # of JSON: the answer is built whole in memory before it is sent
BASE64_GROWTH = 4 / 3
CLIENT_CLOSED = 499  # nginx's "client closed the request" (logged only; nobody receives it)
SPLIT_HINT = "Split it into several batches."

router = APIRouter()


@dataclass
class Item:
    """One item of a batch once checked: its job and budget in seconds, or its error."""

    index: int
    job: SpeechJob | None = None
    budget_s: float = 0.0
    spans: bool = False
    error: ApiError | None = None


@router.post(BATCH_PATH)
async def speech_batch(body: dict[str, Any], request: Request) -> Response:
    """The batch route (see the module docstring)."""
    ctx: ServeContext = request.app.state.ctx
    started = time.perf_counter()
    raw = batch_items(body)
    owner = owner_of(request)
    items = await asyncio.gather(*(off_loop(check_item, index, item, ctx, owner) for index, item in enumerate(raw)))
    check_budget(items, ctx.adapter.sample_rate)
    results = await unless_disconnected(_run_all(ctx, items), request)
    if results is None:
        ctx.metrics.error("client_disconnected")
        ctx.metrics.request_done(CLIENT_CLOSED, "batch")
        return Response(status_code=CLIENT_CLOSED)
    ctx.metrics.duration.observe(time.perf_counter() - started)
    return JSONResponse({"results": results}, headers={"Cache-Control": "no-store"})


def batch_items(body: dict[str, Any]) -> list[Any]:
    """The body's items, checked for shape, count and characters (ApiError 400, for the whole batch)."""
    unknown = sorted(set(body) - {"items"})
    if unknown:
        raise _batch_error(f"Unrecognized field {unknown[0]!r} in the batch body: it takes only \"items\", a list of "
                           "speech requests (each item's fields go inside it).", param=unknown[0],
                           code="unknown_parameter")
    items = body.get("items")
    if not isinstance(items, list):
        raise _batch_error("The batch body needs \"items\": a list of 1 to "
                           f"{MAX_ITEMS} speech requests, each as POST /v1/audio/speech takes it.")
    if not items:
        raise _batch_error(f"The batch has no items: send 1 to {MAX_ITEMS} speech requests in \"items\".")
    if len(items) > MAX_ITEMS:
        raise _batch_error(f"The batch has {len(items)} items; at most {MAX_ITEMS} per batch. {SPLIT_HINT}",
                           code="batch_too_large")
    typed = sum(len(item["input"]) for item in items if isinstance(item, dict) and isinstance(item.get("input"), str))
    if typed > MAX_TYPED_CHARS:
        raise _batch_error(f"The batch's inputs hold {typed:,} characters in all; at most {MAX_TYPED_CHARS:,} per "
                           f"batch. {SPLIT_HINT}", code="batch_too_large")
    return items


def check_item(index: int, raw: Any, ctx: ServeContext, owner: str) -> Item:
    """One item checked as the single route checks a request, and its audio budget planned
    (CPU work: call it off the event loop); its error, if any, is kept in the Item."""
    try:
        body = _speech_request(raw)
        check_model(body.model, ctx.accepted)
        if body.stream_format == "sse":
            raise ApiError(400, "stream_format \"sse\" does not apply in a batch: each item's audio comes whole, in "
                                "base64. Drop stream_format, or send this request to POST /v1/audio/speech.",
                           param="stream_format", code="unsupported_format")
        if body.timestamps:
            raise ApiError(400, "timestamps are not given in a batch; send this request to POST /v1/audio/speech "
                                "with timestamps: true.", param="timestamps", code="unsupported_parameter")
        job = speech_job(body, ctx, owner)
        return Item(index, job, budget_seconds(job, ctx), spans=body.spans)
    except ApiError as exc:
        return Item(index, error=exc)
    except Exception as exc:  # noqa: BLE001 - PromptError (400) or anything else: this item's error only
        return Item(index, error=engine_error(exc))


def budget_seconds(job: SpeechJob, ctx: ServeContext) -> float:
    """The most audio a checked job can make, in seconds: its chunks' token budgets (plus a
    script's pauses), planned against the adapter's limits (PromptError past them)."""
    adapter = ctx.adapter
    if job.parts:
        _, plans = plan_script(adapter.layout, job.parts, adapter.limits)
        tokens = sum(chunk.max_new_tokens for plan in plans for chunk in plan)
        return tokens / adapter.layout.tokens_per_second + sum(part.pause_after_s for part in job.parts)
    chunks = plan_request(job.request, adapter.layout, adapter.limits)
    return sum(chunk.max_new_tokens for chunk in chunks) / adapter.layout.tokens_per_second


def check_budget(items: list[Item], source_rate: int) -> None:
    """The whole batch's 400 when the good items' budgets add up to more than MAX_AUDIO_SECONDS,
    or their answers (as base64, in each item's format and rate) to more than MAX_ANSWER_BYTES."""
    good = [item for item in items if item.error is None]
    total = sum(item.budget_s for item in good)
    if total > MAX_AUDIO_SECONDS:
        raise _batch_error(f"The batch's items could make up to {total:,.0f} s of audio in all (each item's "
                           f"max_seconds over its chunks); at most {MAX_AUDIO_SECONDS:,.0f} s per batch. Lower "
                           f"max_seconds or split it into several batches.", code="batch_too_large")
    answer = sum(item.budget_s * BASE64_GROWTH * max_bytes_per_second(
        item.job.response_format, output_rate(item.job.response_format, source_rate, item.job.sample_rate))
        for item in good)
    if answer > MAX_ANSWER_BYTES:
        raise _batch_error(f"The batch's answer could be up to {answer / 2**20:,.0f} MB (each item's most audio in "
                           f"its format and sample rate, as base64); at most {MAX_ANSWER_BYTES // 2**20} MB per batch. "
                           "Ask for a compressed format (mp3, opus, aac) or a lower sample_rate, lower max_seconds, "
                           "or split it into several batches.", code="batch_too_large")


async def _run_all(ctx: ServeContext, items: list[Item]) -> list[dict]:
    """Every good item on the adapter at once (they take rows together); results in order."""
    return list(await asyncio.gather(*(_run(ctx, item) for item in items)))


async def _run(ctx: ServeContext, item: Item) -> dict:
    """One item's result: its audio and facts, or its error."""
    if item.error is not None:
        return _failed(ctx, item.index, item.error, "none")
    job = item.job
    info: dict = {}
    pieces = script_stream(ctx.adapter, job.parts, info) if job.parts else ctx.adapter.stream(job.request, info)
    rate = ctx.adapter.sample_rate
    try:
        samples = await _gather(pieces)
        data = await off_loop(encode_whole, job.response_format, samples, rate, job.sample_rate)
    except Exception as exc:  # noqa: BLE001 - every failure becomes this item's error body
        return _failed(ctx, item.index, engine_error(exc), job.response_format)
    finally:
        await pieces.aclose()
    ctx.metrics.request_done(200, job.response_format)
    req = job.request
    result = {"index": item.index, "audio": base64.b64encode(data).decode("ascii"), "format": job.response_format,
              "sample_rate": job.sample_rate or rate, "seed": req.seed, "usage": usage(info)}
    if item.spans:
        result["spans"] = info.get("spans") or [{"index": 0, "speaker": None, "voice": req.voice, "text": req.text,
                                                 "start": 0.0, "end": round(len(samples) / rate, 4),
                                                 "pause_after": 0.0, "seed": req.seed}]
    return result


async def _gather(pieces: AsyncIterator[np.ndarray]) -> np.ndarray:
    """The whole clip: float32 [n] at the adapter's rate."""
    got = [piece async for piece in pieces]
    return np.concatenate(got) if got else np.zeros(0, dtype=np.float32)


def usage(info: dict) -> dict:
    """Tokens of one request, as the single route's `speech.audio.done` event reports them."""
    prompt, output = int(info.get("prompt_tokens", 0)), int(info.get("tokens", 0))
    return {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}


def _speech_request(raw: Any) -> SpeechRequest:
    if not isinstance(raw, dict):
        raise ApiError(400, "This item is not a speech request: each item is an object such as {\"model\", "
                            "\"input\", \"voice\", ...}, as POST /v1/audio/speech takes it.", code="invalid_value")
    try:
        return SpeechRequest.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from None


def _failed(ctx: ServeContext, index: int, error: ApiError, fmt: str) -> dict:
    ctx.metrics.error(error.code or str(error.status))
    ctx.metrics.request_done(error.status, fmt)
    return {"index": index, "error": error.body()["error"]}


def _batch_error(message: str, param: str | None = "items", code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)
