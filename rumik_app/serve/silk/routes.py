"""Rumik's hosted-API routes: the router `rumik_app.serve.app` includes.

    client = rumikai.Rumik(api_key=key, base_url="http://127.0.0.1:8000")    # rumik-ai 1.0.0
    client.speech.create(text="[happy] Namaste!")                            # 24 kHz WAV

  POST /v1/tts             the whole utterance as a 24 kHz 16-bit WAV (sizes filled in), with
                           `x-request-id` and `x-rumik-seed`; errors as `{error, message, code}`.
                           This server's `response_format` and `sample_rate` fields choose another
                           format or rate (`x-rumik-sample-rate` says which rate).
  POST /v1/tts/ws-connect  `{ws_url, token, request_id}`: an absolute ws:// (wss:// behind a
                           TLS proxy) URL built from the request's Host, and a single-use token
                           good for TOKEN_TTL_S, minted only for callers with the API key
                           (the socket upgrade carries no Authorization header; the token does).
  WS   /v1/tts/ws?token=   a session (`rumik_app.serve.silk.session.SilkSession`).

Fields, voices, tones and error bodies: `rumik_app.serve.silk.schema`. The tokens live in
`app.state.silk_tokens` (a `TokenStore`, made by `create_app`).
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator

import numpy as np
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response

from rumik_app.asgi import unless_disconnected
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import FORMATS, RATE_HEADER, encode_whole, media_type
from rumik_app.serve.protocol import SEED_HEADER
from rumik_app.serve.scripts import first_request, script_stream
from rumik_app.serve.silk.schema import (
    SilkError,
    SilkFields,
    SilkVoice,
    check_silk_model,
    check_silk_timestamps,
    silk_output,
    silk_request,
    silk_script,
)
from rumik_app.serve.silk.session import SilkSession, request_id, silk_error
from rumik_app.serve.sockets import deny

TOKEN_TTL_S = 60.0  # clients connect right after minting
MAX_TOKENS = 1024  # unredeemed tokens kept; beyond that the oldest go
REQUEST_ID_HEADER = "x-request-id"
HTTP_FORMAT = "wav"  # the hosted API's answer

router = APIRouter()


class TokenStore:
    """Single-use socket tokens (URL-safe), each good for `ttl` seconds after minting."""

    def __init__(self, ttl: float = TOKEN_TTL_S, max_tokens: int = MAX_TOKENS):
        self.ttl, self.max_tokens = ttl, max_tokens
        self.tokens: OrderedDict[str, tuple[float, str]] = OrderedDict()  # token -> (expiry, model)

    def mint(self, model: str) -> str:
        now = time.monotonic()
        while self.tokens and (len(self.tokens) >= self.max_tokens or next(iter(self.tokens.values()))[0] < now):
            self.tokens.popitem(last=False)
        token = secrets.token_urlsafe(24)
        self.tokens[token] = (now + self.ttl, model)
        return token

    def redeem(self, token: str | None) -> str | None:
        """The model the token was minted for, once; None if unknown, used or expired."""
        entry = self.tokens.pop(token or "", None)
        return entry[1] if entry is not None and entry[0] >= time.monotonic() else None


def ws_url(request: Request) -> str:
    """The absolute socket URL for this request's host (wss when the request came over TLS,
    directly or per the proxy's X-Forwarded-Proto)."""
    proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip().lower()
    scheme = "wss" if proto in ("https", "wss") else "ws"
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return f"{scheme}://{host}/v1/tts/ws"


async def _json_body(request: Request) -> dict:
    try:
        return json.loads(await request.body() or b"{}")
    except ValueError:
        raise SilkError(400, "The body is not valid JSON; send e.g. {\"text\": \"Namaste!\", \"model\": \"muga\"}.",
                        "invalid_json") from None


async def _collect(pieces: AsyncIterator[np.ndarray], request: Request) -> list[np.ndarray] | None:
    """Every piece of a stream; None if the client hung up first (the stream is then closed)."""
    async def gather() -> list[np.ndarray]:
        return [piece async for piece in pieces]

    return await unless_disconnected(gather(), request)


def _refused(ctx: ServeContext, error: SilkError, rid: str) -> JSONResponse:
    ctx.metrics.error(error.code)
    ctx.metrics.request_done(error.status, HTTP_FORMAT)
    return JSONResponse(error.body(), status_code=error.status, headers={**error.headers, REQUEST_ID_HEADER: rid})


@router.post("/v1/tts")
async def tts(request: Request) -> Response:
    ctx: ServeContext = request.app.state.ctx
    rid, started = request_id(), time.perf_counter()
    try:
        fields = SilkFields.parse(await _json_body(request))
        check_silk_model(fields.model, ctx.accepted)
        check_silk_timestamps(fields.timestamps, ctx, socket=False)
        fmt, rate = silk_output(fields.response_format, fields.sample_rate, HTTP_FORMAT, FORMATS,
                                ctx.adapter.sample_rate)
        voice = SilkVoice().updated(fields)
        parts = await off_loop(silk_script, fields, voice, ctx)  # SSML: its parts in order; None: plain text
        req = silk_request(fields, voice, ctx) if parts is None else first_request(parts)
        pieces = script_stream(ctx.adapter, parts, {}) if parts else ctx.adapter.stream(req, {})
        try:
            audio = await _collect(pieces, request)
        finally:
            await pieces.aclose()
        if audio is not None:  # a complete file (a WAV with its sizes), resampled and encoded off the loop
            samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
            data = await off_loop(encode_whole, fmt, samples, ctx.adapter.sample_rate, rate)
    except Exception as exc:  # noqa: BLE001 - one readable error body
        return _refused(ctx, silk_error(exc), rid)
    if audio is None:
        ctx.metrics.error("client_disconnected")
        return Response(status_code=499)
    ctx.metrics.request_done(200, fmt, time.perf_counter() - started)
    return Response(data, media_type=media_type(fmt, rate),
                    headers={REQUEST_ID_HEADER: rid, SEED_HEADER: str(req.seed), RATE_HEADER: str(rate),
                             "Cache-Control": "no-store"})


@router.post("/v1/tts/ws-connect")
async def ws_connect(request: Request) -> JSONResponse:
    ctx: ServeContext = request.app.state.ctx
    rid = request_id()
    try:
        fields = SilkFields.parse(await _json_body(request))
        model = check_silk_model(fields.model, ctx.accepted)
    except SilkError as exc:
        return _refused(ctx, exc, rid)
    return JSONResponse({"ws_url": ws_url(request), "token": request.app.state.silk_tokens.mint(model),
                         "request_id": rid}, headers={REQUEST_ID_HEADER: rid, "Cache-Control": "no-store"})


@router.websocket("/v1/tts/ws")
async def tts_ws(ws: WebSocket) -> None:
    ctx: ServeContext = ws.app.state.ctx
    if ws.app.state.silk_tokens.redeem(ws.query_params.get("token")) is None:
        error = SilkError(401, "The socket token is missing, used or expired; mint one with POST "
                               "/v1/tts/ws-connect and connect within a minute.", "invalid_token")
        ctx.metrics.error(error.code)
        await deny(ws, 401, error.body())
        return
    async with ctx.sessions.session(ws) as session:
        if session is not None:
            await SilkSession(session, ctx).run()
