"""The speech server's FastAPI app: one router per protocol over one adapter.

    app = create_app(adapter, model_name="rumik-oss-1", api_key=None)
    SpeechServer(uvicorn.Config(app, port=8000), adapter).run()   # what `python -m rumik_app.serve` does

Routers, each in its own module: OpenAI's speech API (`rumik_app.serve.openai.routes`),
Rumik's hosted API (`rumik_app.serve.silk.routes`), text streamed in
(`rumik_app.serve.text_in`), lexicons (`rumik_app.serve.lexicons`), the voice library
(`rumik_app.serve.voices`), voice adaptations (`rumik_app.serve.adaptations`), long jobs
(`rumik_app.serve.jobs`) and the operators' routes (`rumik_app.serve.ops`). They share one
`ServeContext` (`app.state.ctx`: the adapter, metrics, sessions, names and defaults). With an
API key the /v1 routes need `Authorization: Bearer KEY` (`rumik_app.serve.gate.RequestGate`
checks it, and the body size, before FastAPI parses anything) and /docs and /openapi.json are
closed. Errors leave as OpenAI's error body (`rumik_app.serve.errors.ApiError`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rumik_app.align import DEFAULT_ALIGNERS, AlignerSet
from rumik_app.request import DEFAULT_MAX_SECONDS, check_max_seconds
from rumik_app.serve import adaptations as adaptation_routes
from rumik_app.serve import lexicons as lexicon_routes
from rumik_app.serve import ops, text_in
from rumik_app.serve import voices as voice_routes
from rumik_app.serve.context import ServeContext
from rumik_app.serve.errors import ApiError
from rumik_app.serve.gate import RequestGate
from rumik_app.serve.jobs import JobRunner
from rumik_app.serve.jobs import routes as jobs_routes
from rumik_app.serve.lexicons import LexiconStore
from rumik_app.serve.metrics import ServerMetrics
from rumik_app.serve.openai import batch as batch_routes
from rumik_app.serve.openai import routes as openai_routes
from rumik_app.serve.openai.schema import validation_error
from rumik_app.serve.protocol import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    SpeechAdapter,
)
from rumik_app.serve.silk import routes as silk_routes
from rumik_app.serve.sockets import SessionRegistry
from rumik_app.voices.makers import VoiceMaker

log = logging.getLogger(__name__)

ROUTERS = (openai_routes.router, batch_routes.router, silk_routes.router, text_in.router, lexicon_routes.router,
           voice_routes.router, adaptation_routes.router, jobs_routes.router, ops.router)


def create_app(adapter: SpeechAdapter, model_name: str, aliases: tuple[str, ...] = (),
               api_key: str | Sequence[str] | None = None,
               shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
               voice_map: dict[str, str] | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
               max_seconds: float = DEFAULT_MAX_SECONDS, admin_key: str | None = None,
               body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
               max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
               data_dir: str | Path | None = None,
               aligners: AlignerSet | Sequence[str] | None = DEFAULT_ALIGNERS,
               voice_maker: VoiceMaker | None = None) -> FastAPI:
    """The app for one adapter. model_name: what /v1/models lists (aliases are accepted too);
    voice_map: extra voice names (see `openai.schema.parse_voice_map`); max_sessions: WebSocket
    sessions (Silk's and text-in's) open at once, max_sessions_per_client of them per client
    address; max_seconds: the cap per chunk when a request gives none; admin_key: what
    /v1/admin/ routes need (None: they are closed); body_timeout: seconds a body may take;
    api_key: one key or several (each owns its own lexicons); data_dir: where lexicons are kept
    (None: in memory); aligners: the word aligners, or their specs (`server_aligners`);
    voice_maker: what runs /v1/voices/adaptations (None: 501), started and closed with the app."""
    sessions = SessionRegistry(max_sessions, max_sessions_per_client)
    metrics = ServerMetrics(adapter, sessions)
    ctx = ServeContext(adapter, metrics, sessions, (model_name, *aliases), voice_map, check_max_seconds(max_seconds),
                       lexicons=LexiconStore(Path(data_dir) / "lexicons" if data_dir else None),
                       body_timeout=body_timeout,
                       aligners=server_aligners(aligners))
    jobs = JobRunner(adapter, Path(data_dir) / "jobs" if data_dir else None)  # off (501) without --data-dir

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await adapter.start()
        await jobs.start()  # resumes unfinished jobs
        if voice_maker is not None:
            await asyncio.to_thread(voice_maker.start)  # queues again what a killed server was adapting
        try:
            yield
        finally:
            if voice_maker is not None:  # a running adaptation stops at its next check, resumes on the next start
                await asyncio.to_thread(voice_maker.close)
            await jobs.stop()  # chunks in progress are made again after a restart
            adapter.begin_shutdown()
            await adapter.stop(shutdown_timeout)

    closed = {"docs_url": None, "redoc_url": None, "openapi_url": None} if api_key is not None else {}
    app = FastAPI(title="rumik-oss-1 speech server", lifespan=lifespan, **closed)
    app.state.ctx, app.state.created = ctx, int(time.time())
    app.state.jobs, app.state.voice_maker = jobs, voice_maker
    app.state.silk_tokens = silk_routes.TokenStore()
    app.add_middleware(RequestGate, api_key=api_key, metrics=metrics, admin_key=admin_key,
                       body_timeout=body_timeout)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid_body)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for router in ROUTERS:
        app.include_router(router)
    return app


def server_aligners(aligners: AlignerSet | Sequence[str] | None) -> AlignerSet | None:
    """The server's word aligners: None or empty specs turn timestamps off; the default set loads what it can
    (and without any, timestamps are off, with a warning), an explicit one must load whole (AlignmentError)."""
    if isinstance(aligners, AlignerSet) or not aligners:
        return aligners or None
    loaded = AlignerSet.load(aligners, strict=tuple(aligners) != DEFAULT_ALIGNERS)
    if not loaded.aligners:
        log.warning("no word aligner loaded (%s): requests with timestamps get a 400",
                    "; ".join(loaded.errors.values()))
        return None
    return loaded


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    metrics = request.app.state.ctx.metrics
    metrics.error(exc.code or str(exc.status))
    metrics.request_done(exc.status, "none")
    return _error_response(exc)


async def _invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
    return await _api_error(request, validation_error(exc.errors()))


async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return _error_response(ApiError(exc.status_code, str(exc.detail), code=str(exc.status_code)))


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
        state = getattr(self.config.app, "state", None)
        ctx = getattr(state, "ctx", None)
        if ctx is not None:
            await ctx.sessions.drain(self.config.timeout_graceful_shutdown or DEFAULT_SHUTDOWN_TIMEOUT_S)
        await super().shutdown(sockets=sockets)
