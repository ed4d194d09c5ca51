"""Voice adaptations over HTTP: a visitor's recordings become a library voice, as a background job.

    POST   /v1/voices/adaptations        multipart/form-data -> 202 {"id": "vjob_...", "state": "queued", ...}
                                         (the job as created; the worker may have started it since)
             name          the new voice's name (2-32 letters, digits, _ or -)
             statement     the consent statement the speaker reads
             consent       the speaker's recording of it (or, with consent_document=true, a signed document)
             recordings    audio files, same-stem .txt transcripts, or .zip archives of them (repeat the field)
             language      optional: the recordings' language code when transcripts do not show it
             settings      optional, repeated: KEY=VALUE under data., train., lora.rank, lora.alpha
    GET    /v1/voices/adaptations/{id}   {"id", "name", "state", "step", "error", ..., "events": [...]}
                                         (?after=SEQ: events after that one); with `Accept: text/event-stream`
                                         the events as server-sent events until the job ends
    DELETE /v1/voices/adaptations/{id}   cancel: a queued job at once, a running one at its next check

    curl localhost:8000/v1/voices/adaptations -H "Authorization: Bearer $ADMIN" -F name=Arjun \\
        -F statement="$STATEMENT" -F consent=@consent.wav -F recordings=@arjun.zip

Every route takes the admin key (`gate.is_admin_route`). The server runs adaptations with
`--adapt-voices` (and `--voices DIR --data-dir DIR`): its maker comes from the
`rumik_app.voice_makers` entry points (rumik_app.voices.makers), so this module imports no
training code. The body is read as it arrives, at most MAX_UPLOAD_BYTES within the body deadline,
parsed by Starlette's multipart parser with bounded parts and fields, and each file is written
under the maker's staging folder by its own name, which must be a plain file name (no folders,
no `..`). The maker checks the rest (the name, the consent, zips, the recordings' headers) before
it queues anything; what it refuses is one readable 4xx, and nothing of the upload is kept. When a
job is done its voice is in the library folder, which the engine reloads on its next request
(rumik_app.voices.library), so `/v1/voices` lists it without a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from rumik_app.asgi import header
from rumik_app.errors import RumikError
from rumik_app.serve.errors import ApiError
from rumik_app.serve.voices import capped_body, upload_deadline, voice_error
from rumik_app.voices.makers import (
    FINAL_STATES,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_FILES,
    UPLOAD_TOO_LARGE,
    AdaptationsFull,
    UnknownAdaptation,
    VoiceMaker,
    check_upload_name,
)
from rumik_app.voices.package import VoiceError

log = logging.getLogger(__name__)

ADAPTATIONS_PATH = "/v1/voices/adaptations"
MAX_FIELDS = 64  # name, statement, language, consent_document and the settings
MAX_FIELD_BYTES = 16 * 1024
MAX_EVENTS_PER_ANSWER = 1_000
POLL_S = 0.5
KEEP_ALIVE_S = 15.0
MAX_STREAM_S = 3600.0  # one event stream; a client reconnects with Last-Event-ID to go on
COPY_BLOCK = 1 << 20
NO_MAKER = ("This server does not adapt voices; start it with --adapt-voices --voices DIR --data-dir DIR "
            "(and --admin-key).")

router = APIRouter()


def _maker(request: Request) -> VoiceMaker:
    maker = getattr(request.app.state, "voice_maker", None)
    if maker is None:
        raise ApiError(501, NO_MAKER, code="no_voice_adaptation")
    return maker


def maker_error(exc: RumikError) -> ApiError:
    """A maker's refusal as the API answers it: 404 unknown job, 429 full queue, else 400."""
    if isinstance(exc, UnknownAdaptation):
        return ApiError(404, str(exc), code="adaptation_not_found")
    if isinstance(exc, AdaptationsFull):
        return ApiError(429, str(exc), code="adaptations_full", headers={"Retry-After": "600"})
    if isinstance(exc, VoiceError):
        return voice_error(exc)
    return ApiError(400, str(exc), code="invalid_adaptation")


async def _call(function, *args, **kwargs):
    """A maker's method off the event loop, its user errors as ApiErrors."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except RumikError as exc:
        raise maker_error(exc) from None


@router.post(ADAPTATIONS_PATH)
async def create_adaptation(request: Request) -> JSONResponse:
    maker = _maker(request)
    media = (header(request.scope, b"content-type") or "").split(";")[0].strip().lower()
    if media != "multipart/form-data":
        raise ApiError(415, "Send the adaptation as multipart/form-data (curl -F name=... -F consent=@consent.wav "
                            "-F recordings=@recordings.zip ...).", code="unsupported_media_type")
    staging = await asyncio.to_thread(maker.staging)
    try:
        form = await _receive_form(request, request.app.state.ctx.body_timeout)
        try:
            fields = await asyncio.to_thread(_write_upload, form, staging)
        finally:
            await form.close()
        created = await _call(maker.submit, fields["name"], staging / "recordings", fields["consent"],
                              fields["statement"], document=fields["document"], settings=fields["settings"])
    finally:
        await asyncio.to_thread(shutil.rmtree, staging, True)
    return JSONResponse(_described(created, []), status_code=202)  # as created: the worker may have it already


async def _receive_form(request: Request, timeout: float):
    """The multipart body parsed as it arrives: at most MAX_UPLOAD_BYTES, all of it within `timeout` s."""
    parser = MultiPartParser(request.headers, capped_body(request, MAX_UPLOAD_BYTES, _too_large),
                             max_files=MAX_UPLOAD_FILES + 1, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
    try:
        async with upload_deadline(timeout, "it", "The upload", "send less"):
            return await parser.parse()
    except MultiPartException as exc:
        raise ApiError(400, f"The form cannot be read: {exc.message} (at most {MAX_UPLOAD_FILES:,} files and "
                            f"{MAX_FIELDS} fields; zip many small recordings).", code="invalid_form") from None


def _too_large() -> ApiError:
    return ApiError(413, UPLOAD_TOO_LARGE, code="request_too_large", headers={"Connection": "close"})


def _write_upload(form, staging: Path) -> dict:
    """The form's files written under `staging` (recordings/ and the consent), its fields checked."""
    recordings = staging / "recordings"
    recordings.mkdir()
    fields: dict = {"settings": [], "document": False, "consent": None}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key == "consent" and fields["consent"] is None:
                fields["consent"] = _save(value, staging, prefix="consent")
            elif key == "recordings":
                _save(value, recordings)
            else:
                raise ApiError(400, f"File field {key[:40]!r} is not read: send one `consent` file and the "
                                    "`recordings` files.", param=key[:40], code="invalid_form")
        elif key in ("name", "statement", "language"):
            fields[key] = value.strip()
        elif key == "consent_document":
            fields["document"] = value.strip().lower() in ("1", "true", "yes", "on")
        elif key == "settings":
            fields["settings"].extend(line.strip() for line in value.splitlines() if line.strip())
        else:
            raise ApiError(400, f"Field {key[:40]!r} is not read: send name, statement, consent, recordings and "
                                "optionally language, consent_document and settings.", param=key[:40],
                           code="invalid_form")
    for required in ("name", "statement", "consent"):
        if not fields.get(required):
            raise ApiError(400, f"The form has no {required!r}: an adaptation needs the voice's name, the consent "
                                "statement and the consent recording (or document).", param=required,
                           code="invalid_form")
    if not any(recordings.iterdir()):
        raise ApiError(400, "The form has no recordings: send the speaker's audio files (or a zip) as `recordings`.",
                       param="recordings", code="invalid_form")
    if fields.get("language"):
        fields["settings"].append(f"data.language={fields['language']}")
    return fields


def _save(upload: UploadFile, folder: Path, prefix: str | None = None) -> Path:
    """One uploaded file into `folder` under its own plain name (or `prefix` + its suffix)."""
    try:
        name = check_upload_name(upload.filename)
    except VoiceError as exc:
        raise ApiError(400, str(exc), param="recordings", code="invalid_file_name") from None
    path = folder / ((prefix + Path(name).suffix.lower()) if prefix else name)
    try:
        with path.open("xb") as out:
            upload.file.seek(0)
            shutil.copyfileobj(upload.file, out, COPY_BLOCK)
    except FileExistsError:
        raise ApiError(400, f"{name[:80]!r} is in the upload twice; send each recording once.",
                       param="recordings", code="invalid_file_name") from None
    return path


@router.get(ADAPTATIONS_PATH + "/{job_id}", response_model=None)
async def get_adaptation(request: Request, job_id: str, after: int = 0) -> dict | StreamingResponse:
    maker = _maker(request)
    status = await _call(maker.status, job_id)
    if "text/event-stream" in (header(request.scope, b"accept") or ""):
        last = header(request.scope, b"last-event-id") or ""
        return StreamingResponse(_stream(maker, job_id, int(last) if last.isdigit() else max(after, 0)),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-store"})
    events = await _call(maker.events, job_id, max(after, 0))
    return _described(status, events[:MAX_EVENTS_PER_ANSWER])


@router.delete(ADAPTATIONS_PATH + "/{job_id}")
async def cancel_adaptation(request: Request, job_id: str) -> dict:
    return _described(await _call(_maker(request).cancel, job_id), [])


def _described(status: dict, events: list[tuple[int, dict]]) -> dict:
    return {"object": "voice.adaptation", **status, "events": [{"seq": seq, **event} for seq, event in events]}


async def _stream(maker: VoiceMaker, job_id: str, after: int) -> AsyncIterator[bytes]:
    """`event: progress` per event (its seq as the SSE id), then `event: <final state>` with the status;
    a comment every KEEP_ALIVE_S; at most MAX_STREAM_S (reconnect with Last-Event-ID)."""
    start = quiet = time.monotonic()
    while time.monotonic() - start < MAX_STREAM_S:
        status = await asyncio.to_thread(maker.status, job_id)
        for seq, event in await asyncio.to_thread(maker.events, job_id, after):
            after, quiet = seq, time.monotonic()
            yield f"id: {seq}\nevent: progress\ndata: {json.dumps(event)}\n\n".encode()
        if status["state"] in FINAL_STATES:
            yield f"event: {status['state']}\ndata: {json.dumps(status)}\n\n".encode()
            return
        if time.monotonic() - quiet > KEEP_ALIVE_S:
            quiet = time.monotonic()
            yield b": keep-alive\n\n"
        await asyncio.sleep(POLL_S)
