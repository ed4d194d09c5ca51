"""The speech server's FastAPI app: OpenAI's `/v1/audio/speech` and friends over an adapter.

    app = create_app(adapter, model_name="rumik-oss-1", api_key=None)
    SpeechServer(uvicorn.Config(app, port=8000), adapter).run()   # what `python -m rumik_app.serve` does

Routes: POST /v1/audio/speech (streamed), GET /v1/audio/voices, GET /v1/models,
GET /health, GET /metrics, POST /v1/admin/unload (frees the model's memory until the next
request; needs an API key to be set); Rumik's hosted-API routes (`rumik_app.serve.silk`) and
the text-in socket (`rumik_app.serve.text_in`). With an API key, the /v1 routes need `Authorization: Bearer KEY`
(/health and /metrics stay open for load balancers and scrapers) and /docs and
/openapi.json are closed. `RequestGate` runs in front of FastAPI: it checks the key from the
headers alone and refuses a body over MAX_BODY_BYTES (413) before any of it is parsed, so a
caller without the key, or with a huge body, costs the server nothing.

A speech request is checked field by field (400 with OpenAI's error body), submitted to
the adapter, and answered once its first audio is ready, so queue-full (503 +
Retry-After), shutting-down (503) and engine errors still get a status code; the
body then streams (chunked) as the engine produces audio. A client that hangs up while
waiting or mid-stream cancels its request, which frees its batch row.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rumik_app.prompt import ACCENTS, ALLOWED_TAGS, PACES, TONES, VOICE_NOTE
from rumik_app.request import DEFAULT_MAX_SECONDS, resolve_seed
from rumik_app.serve.asgi import declared_length, header, read_body, replay, send_json, unless_disconnected
from rumik_app.serve.encoding import make_encoder
from rumik_app.serve.metrics import CONTENT_TYPE, ServerMetrics
from rumik_app.serve.protocol import (
    DEFAULT_MAX_SESSIONS, DEFAULT_SHUTDOWN_TIMEOUT_S, SpeechAdapter,
)
from rumik_app.serve.schema import (
    ApiError, SpeechJob, SpeechRequest, check_model, engine_error, to_synthesis_request, validation_error,
)
from rumik_app.serve.silk import add_silk_routes
from rumik_app.serve.sockets import ServeContext, SessionRegistry
from rumik_app.serve.text_in import add_text_in_route

log = logging.getLogger(__name__)

# A speech request is a few KB (input is at most SERVER_LIMITS.max_chars characters); nothing
# else in this API takes a body.
MAX_BODY_BYTES = 64 * 1024
SEED_HEADER = "x-rumik-seed"  # the seed used (a random one when the request gave none): reproduces the audio
CLIENT_CLOSED = 499  # nginx's status for "client closed the request" (logged only; nobody receives it)


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def key_error(authorization: str | None, api_key: str | None) -> ApiError | None:
    """The 401 for an Authorization header that does not carry `api_key` (None: it does, or no key is set)."""
    if api_key is None:
        return None
    scheme, _, given = (authorization or "").partition(" ")
    if not authorization:
        return ApiError(401, "You didn't provide an API key. Send it as the header 'Authorization: Bearer KEY' "
                             "(the openai client: api_key=KEY).", code="missing_api_key")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), api_key.encode()):
        return ApiError(401, "Incorrect API key provided. Use the key the server was started with (--api-key).",
                        code="invalid_api_key")
    return None


SILK_PREFIX = "/v1/tts"  # Rumik's hosted-API routes (rumik_app.serve.silk): errors in its body shape
SILK_SOCKET = "/v1/tts/ws"  # its socket carries a token minted with the key, not the key itself


class RequestGate:
    """Pure ASGI, in front of FastAPI: the API key of /v1 routes from the headers alone, and
    no body over `max_body` bytes (413), each refused before any body is read or parsed.
    WebSocket upgrades to /v1 need the key too (as `Authorization: Bearer`), except Silk's
    socket, whose token the endpoint checks; a refused upgrade gets the HTTP 401."""

    def __init__(self, app, api_key: str | None, metrics: ServerMetrics, max_body: int = MAX_BODY_BYTES):
        self.app, self.api_key, self.metrics, self.max_body = app, api_key, metrics, max_body

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = self._check_headers(scope)
        if refused is None and scope["method"] in ("POST", "PUT", "PATCH"):
            body = await read_body(receive, self.max_body)
            if body is None:
                refused = self._too_large()
            else:
                receive = replay(body, receive)
        if refused is not None:
            self.metrics.error(refused.code)
            self.metrics.request_done(refused.status, "none")
            return await send_json(send, refused.status, refused.body(silk=scope["path"].startswith(SILK_PREFIX)),
                                   refused.headers)
        await self.app(scope, receive, send)

    async def _websocket(self, scope, receive, send) -> None:
        path = scope["path"]
        refused = None
        if path.startswith("/v1") and path != SILK_SOCKET:
            refused = key_error(header(scope, b"authorization"), self.api_key)
        if refused is None:
            return await self.app(scope, receive, send)
        self.metrics.error(refused.code)
        await receive()  # websocket.connect
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": refused.status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "websocket.http.response.body", "body": json.dumps(refused.body()).encode()})
        else:
            await send({"type": "websocket.close", "code": 1008})

    def _check_headers(self, scope) -> ApiError | None:
        if scope["path"].startswith("/v1"):
            error = key_error(header(scope, b"authorization"), self.api_key)
            if error is not None:
                return error
        length = declared_length(scope)
        return self._too_large() if length is not None and length > self.max_body else None

    def _too_large(self) -> ApiError:
        return ApiError(413, f"The request body is larger than {self.max_body // 1024} KB; a speech request is a few "
                             "KB.", code="request_too_large")


async def _first_piece(pieces: AsyncIterator[np.ndarray], request: Request) -> np.ndarray | None:
    """The first audio piece; None if the client hung up first (the request is then cancelled)."""
    return await unless_disconnected(anext(pieces, np.zeros(0, dtype=np.float32)), request)


def create_app(adapter: SpeechAdapter, model_name: str, aliases: tuple[str, ...] = (), api_key: str | None = None,
               shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
               voice_map: dict[str, str] | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
               max_seconds: float = DEFAULT_MAX_SECONDS) -> FastAPI:
    """The app for one adapter. model_name: what /v1/models lists (aliases are accepted too);
    voice_map: extra voice names (see `schema.parse_voice_map`); max_sessions: WebSocket
    sessions (Silk's and text-in's) open at once; max_seconds: the cap per chunk when a
    request gives none."""
    sessions = SessionRegistry(max_sessions)
    metrics = ServerMetrics(adapter, sessions)
    accepted = (model_name, *aliases)
    ctx = ServeContext(adapter, metrics, sessions, accepted, voice_map, adapter.max_new_tokens_for(max_seconds))
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await adapter.start()
        try:
            yield
        finally:
            adapter.begin_shutdown()
            await adapter.stop(shutdown_timeout)

    closed = {"docs_url": None, "redoc_url": None, "openapi_url": None} if api_key is not None else {}
    app = FastAPI(title="rumik-oss-1 speech server", lifespan=lifespan, **closed)
    app.state.adapter, app.state.metrics, app.state.sessions = adapter, metrics, sessions
    app.add_middleware(RequestGate, api_key=api_key, metrics=metrics)
    app.state.silk_tokens = add_silk_routes(app, ctx)
    add_text_in_route(app, ctx)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        metrics.error(exc.code or str(exc.status))
        metrics.request_done(exc.status, "none")
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc.errors())
        metrics.error(error.code)
        metrics.request_done(error.status, "none")
        return _error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error_response(ApiError(exc.status_code, str(exc.detail), code=str(exc.status_code)))

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechRequest, request: Request) -> Response:
        started = time.perf_counter()
        check_model(body.model, accepted)
        spec = to_synthesis_request(body, adapter.voices, adapter.max_new_tokens_for, adapter.limits.max_chars,
                                    voice_map, ctx.default_max_new_tokens)
        req = spec.request.with_(seed=resolve_seed(spec.request.seed))  # known now: sent back in a header
        info: dict = {}
        pieces = adapter.stream(req, info)
        try:
            first = await _first_piece(pieces, request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one readable error body
            await pieces.aclose()
            raise engine_error(exc) from None
        if first is None:
            await pieces.aclose()
            metrics.error("client_disconnected")
            metrics.request_done(CLIENT_CLOSED, spec.response_format)
            return Response(status_code=CLIENT_CLOSED)
        metrics.first_audio.observe(time.perf_counter() - started)
        media = "text/event-stream" if spec.sse else make_encoder(spec.response_format, adapter.sample_rate).media_type
        return StreamingResponse(_body(spec, first, pieces, info, started), media_type=media,
                                 headers={SEED_HEADER: str(req.seed), "Cache-Control": "no-store"})

    async def _body(spec: SpeechJob, first: np.ndarray, pieces: AsyncIterator[np.ndarray], info: dict,
                    started: float) -> AsyncIterator[bytes]:
        encoder = make_encoder(spec.response_format, adapter.sample_rate)
        frame = _sse_event if spec.sse else (lambda data: data)
        finished = False
        try:
            data = encoder.header() + encoder.encode(first)
            if data:
                yield frame(data)
            async for piece in pieces:
                data = encoder.encode(piece)
                if data:
                    yield frame(data)
            data = encoder.finish()
            if data:
                yield frame(data)
            if spec.sse:
                yield _sse_done(info)
            finished = True
            metrics.request_done(200, spec.response_format, time.perf_counter() - started)
        except asyncio.CancelledError:
            metrics.error("client_disconnected")
            raise
        except Exception:
            log.exception("speech stream failed after the first audio; closing the connection")
            metrics.error("stream_failed")
            raise
        finally:
            await pieces.aclose()
            if not finished:
                metrics.request_done(200, spec.response_format)

    @app.post("/v1/admin/unload")
    async def admin_unload() -> dict:
        """Unload the model now (its memory is freed; the next request reloads it)."""
        if api_key is None:
            raise ApiError(403, "Admin routes need the server's API key: start it with --api-key KEY (or "
                                "RUMIK_API_KEY) and send 'Authorization: Bearer KEY'.", code="admin_needs_key")
        try:
            unloaded = await adapter.unload()
        except NotImplementedError as exc:
            raise ApiError(501, str(exc), code="not_supported") from None
        if not unloaded:
            raise ApiError(409, "Requests are decoding or waiting; the model can be unloaded once they finish "
                                "(or it unloads by itself after --idle-unload).", code="busy")
        return {"loaded": False}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "rumik-ai", "backend": adapter.backend}]}

    @app.get("/v1/audio/voices")
    async def voices() -> dict:
        return {"voices": list(adapter.voices), "aliases": dict(voice_map or {}), "note": VOICE_NOTE,
                "tones": list(TONES), "accents": list(ACCENTS), "paces": list(PACES), "tags": list(ALLOWED_TAGS)}

    @app.get("/health")
    async def health() -> JSONResponse:
        s = adapter.stats()
        status = "ok" if s.healthy and not s.draining else "draining" if s.healthy else "failed"
        body = {"status": status, "model": model_name, "backend": adapter.backend, **s.to_dict()}
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app


def _sse_event(data: bytes) -> bytes:
    """OpenAI's `stream_format="sse"` audio event: base64 of the next bytes of the format."""
    event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
    return f"data: {json.dumps(event)}\n\n".encode()


def _sse_done(info: dict) -> bytes:
    prompt, output = int(info.get("prompt_tokens", 0)), int(info.get("tokens", 0))
    event = {"type": "speech.audio.done",
             "usage": {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}}
    return f"data: {json.dumps(event)}\n\n".encode()


class SpeechServer(uvicorn.Server):
    """uvicorn's server that tells the adapter to drain as soon as shutdown begins (SIGTERM):
    requests still waiting for a batch row get 503, streaming ones run to their end (within
    `timeout_graceful_shutdown`), then the lifespan stops the adapter. WebSocket sessions
    drain the same way (`SessionRegistry.drain`) before uvicorn closes the connections,
    which it would otherwise do at once, mid-utterance."""

    def __init__(self, config: uvicorn.Config, adapter: SpeechAdapter):
        super().__init__(config)
        self.adapter = adapter

    async def shutdown(self, sockets=None) -> None:
        self.adapter.begin_shutdown()
        for server in self.servers:  # stop accepting first (uvicorn does it again, harmlessly)
            server.close()
        sessions = getattr(getattr(self.config.app, "state", None), "sessions", None)
        if sessions is not None:
            await sessions.drain(self.config.timeout_graceful_shutdown or DEFAULT_SHUTDOWN_TIMEOUT_S)
        await super().shutdown(sockets=sockets)
