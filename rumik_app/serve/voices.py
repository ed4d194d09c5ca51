"""The voice library on the speech server (`--voices DIR`, docs/voices.md): list, import, delete.

    GET    /v1/voices               {"object": "list", "data": [{"name", "kind": "builtin"|"library",
                                    "languages", ...}]}: the checkpoint's voices, then the library's
                                    (created_at, data_hours, evaluation, lora, consent sha256 and date)
    POST   /v1/voices[?replace=true]   body: a voice archive (Content-Type: application/zip) -> 201 + its
                                    summary; 400 a bad package, 409 the name is taken, 413 too large
    DELETE /v1/voices/{name}        204; 404 unknown, 400 a built-in voice

Reading takes an API key like every /v1 route; importing and deleting take the admin key
(`gate.is_admin_route`, checked in front with the /v1/admin/ routes). The archive is read
incrementally into a dot-file of the library folder, under `MAX_ARCHIVE_BYTES` and the server's
body deadline (--body-timeout), then checked and moved into place off the event loop
(`VoiceLibrary.import_archive`). Errors are one readable message (`ApiError`), never a trace.
`GET /v1/audio/voices` lists library voices too: the adapter's `voices` are the engine's, which
include the library's as it is now (it reloads when its folder changes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from rumik_app.asgi import header
from rumik_app.serve.context import ServeContext
from rumik_app.serve.errors import ApiError
from rumik_app.voices.archive import MAX_ARCHIVE_BYTES, ArchiveTooLarge, archive_too_large
from rumik_app.voices.library import UnknownVoice, VoiceExists, VoiceLibrary, catalog, describe
from rumik_app.voices.package import VoiceError

log = logging.getLogger(__name__)

ARCHIVE_TYPES = ("application/zip", "application/x-zip-compressed", "application/octet-stream")
NO_LIBRARY = "This server has no voice library; start it with --voices DIR to add voices."

router = APIRouter()


def voice_error(exc: VoiceError) -> ApiError:
    """A library's error as the API answers it: 404 unknown, 409 taken, 413 too large, else 400."""
    if isinstance(exc, UnknownVoice):
        return ApiError(404, str(exc), param="name", code="voice_not_found")
    if isinstance(exc, VoiceExists):
        return ApiError(409, str(exc), param="replace", code="voice_exists")
    if isinstance(exc, ArchiveTooLarge):
        return ApiError(413, str(exc), code="request_too_large", headers={"Connection": "close"})
    return ApiError(400, str(exc), code="invalid_voice")


def _library(ctx: ServeContext) -> VoiceLibrary | None:
    return getattr(ctx.adapter, "library", None)


def _builtin(ctx: ServeContext, library: VoiceLibrary | None) -> list[str]:
    """The checkpoint's own voices: the adapter's, less the library's."""
    served = {name.lower() for name in library.names()} if library is not None else set()
    return [name for name in ctx.adapter.voices if name.lower() not in served]


@router.get("/v1/voices")
async def list_voices(request: Request) -> dict:
    ctx: ServeContext = request.app.state.ctx
    library = _library(ctx)
    voices = await asyncio.to_thread(lambda: catalog(_builtin(ctx, library), library))  # a rescan reads files
    return {"object": "list", "data": voices}


@router.post("/v1/voices")
async def import_voice(request: Request, replace: bool = False) -> JSONResponse:
    ctx: ServeContext = request.app.state.ctx
    library = _library(ctx)
    if library is None:
        raise ApiError(501, NO_LIBRARY, code="no_voice_library")
    media = (header(request.scope, b"content-type") or "").split(";")[0].strip().lower()
    if media not in ARCHIVE_TYPES:
        raise ApiError(415, f"Send the voice archive itself as the body with Content-Type: application/zip, not "
                            f"{media[:60] or 'no type'!r} (e.g. curl --data-binary @Arjun.zip -H 'Content-Type: "
                            "application/zip').", code="unsupported_media_type")
    upload = await asyncio.to_thread(library.upload_path)
    try:
        await _receive(request, upload, ctx.body_timeout)
        package = await asyncio.to_thread(library.import_archive, upload, replace)
    except VoiceError as exc:
        raise voice_error(exc) from None
    except ApiError:
        raise
    except Exception:  # noqa: BLE001 - a bug or a full disk: logged, one readable line for the client
        log.exception("importing a voice archive failed")
        raise ApiError(500, "Importing the voice failed; the server log says why.", type="server_error",
                       code="server_error") from None
    finally:
        with contextlib.suppress(OSError):
            upload.unlink()
    return JSONResponse(describe(package), status_code=201)


async def _receive(request: Request, path: Path, timeout: float) -> int:
    """The request body into `path`, at most MAX_ARCHIVE_BYTES, all of it within `timeout` s."""
    size = 0
    async with upload_deadline(timeout, "the archive", "The voice archive", "send it faster"):
        with path.open("wb") as out:
            async for chunk in capped_body(request, MAX_ARCHIVE_BYTES, lambda: voice_error(archive_too_large())):
                size += len(chunk)
                out.write(chunk)
    return size


async def capped_body(request: Request, cap: int, too_large) -> AsyncIterator[bytes]:
    """The request body as it arrives; `too_large()` (an ApiError) is raised once it passes `cap` bytes."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large()
        yield chunk


@contextlib.asynccontextmanager
async def upload_deadline(timeout: float, again: str, subject: str, hint: str) -> AsyncIterator[None]:
    """A streamed upload's body deadline (`timeout` s from its headers): a body cut off is a 400 ("send
    `again` again"), a slow one a 408 naming `subject` and the `hint`, each one readable line."""
    try:
        async with asyncio.timeout(timeout):
            yield
    except ClientDisconnect:
        raise ApiError(400, f"The upload was cut off before its end; send {again} again.",
                       code="client_disconnected") from None
    except TimeoutError:
        raise ApiError(408, f"{subject} did not arrive within {timeout:g} s of its headers; {hint}, or start the "
                            "server with a longer --body-timeout.", code="request_timeout",
                       headers={"Connection": "close"}) from None


@router.delete("/v1/voices/{name}")
async def delete_voice(request: Request, name: str) -> Response:
    ctx: ServeContext = request.app.state.ctx
    library = _library(ctx)
    if name.lower() in {voice.lower() for voice in _builtin(ctx, library)}:
        raise ApiError(400, f"{name!r} is one of the checkpoint's own voices; only library voices can be deleted.",
                       param="name", code="builtin_voice")
    if library is None:
        raise ApiError(501, NO_LIBRARY, code="no_voice_library")
    try:
        removed = await asyncio.to_thread(library.delete, name)
    except VoiceError as exc:
        raise voice_error(exc) from None
    log.info("deleted voice %s from %s", removed, library.folder)
    return Response(status_code=204)
