"""Rumik's hosted-API protocol ("Silk") on this server, so its official clients work unchanged.

    add_silk_routes(app, ctx)                     # ctx: sockets.ServeContext (adapter, metrics, ...)
    client = rumikai.Rumik(api_key=key, base_url="http://127.0.0.1:8000")    # rumik-ai 1.0.0
    client.speech.create(text="[happy] Namaste!")                            # 24 kHz WAV

  POST /v1/tts             the whole utterance as a 24 kHz 16-bit WAV (sizes filled in), with
                           `x-request-id` and `x-rumik-seed`; errors as `{error, message, code}`.
  POST /v1/tts/ws-connect  `{ws_url, token, request_id}`: an absolute ws:// (wss:// behind a
                           TLS proxy) URL built from the request's Host, and a single-use token
                           good for TOKEN_TTL_S, minted only for callers with the API key
                           (the socket upgrade carries no Authorization header; the token does).
  WS   /v1/tts/ws?token=   a session (`SilkSession`): text frames in, s16le PCM and JSON
                           control frames out, as docs/ARCHITECTURE.md §15 describes.

Fields, voices, tones and error bodies: `rumik_app.serve.silk_schema`. Audio comes from
`SpeechAdapter.stream`, the rows and stream assembler every other route uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator

import numpy as np
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response

from rumik_app.prompt import PromptError
from rumik_app.request import SynthesisRequest, resolve_seed
from rumik_app.serve.asgi import unless_disconnected
from rumik_app.serve.encoding import make_encoder, to_s16, wav_header
from rumik_app.serve.protocol import EngineFailed, ServerBusy, ShuttingDown
from rumik_app.serve.silk_schema import SilkError, SilkFields, SilkVoice, check_silk_model, silk_request
from rumik_app.serve.sockets import CLOSE_NORMAL, ServeContext, Session, SessionsFull, deny

log = logging.getLogger(__name__)

TOKEN_TTL_S = 60.0  # clients connect right after minting
MAX_TOKENS = 1024  # unredeemed tokens kept; beyond that the oldest go
IDLE_TIMEOUT_S = 60.0  # the hosted API's: no client frame (and nothing playing) this long ends a session
MAX_SESSION_AGE_S = 1800.0  # livekit replaces its sessions at 300 s; a session never ends mid-utterance
QUEUED_EVERY_S = 5.0  # `queued` frames while an utterance waits: livekit gives up after 10 s of silence
REQUEST_ID_HEADER = "x-request-id"
SEED_HEADER = "x-rumik-seed"


def request_id() -> str:
    return "req_" + secrets.token_hex(12)


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


def silk_error(exc: BaseException) -> SilkError:
    """What an adapter raised before the first audio, as the hosted API answers it."""
    if isinstance(exc, SilkError):
        return exc
    if isinstance(exc, PromptError):
        return SilkError(422 if exc.field in (None, "text") else 400, str(exc), "invalid_request")
    if isinstance(exc, (ServerBusy, ShuttingDown, SessionsFull)):
        code = "shutting_down" if isinstance(exc, ShuttingDown) else "overloaded"
        return SilkError(503, str(exc), code, headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, EngineFailed):
        log.error("the speech engine failed: %s", exc)
        return SilkError(500, "The speech engine failed; the server log says why.", "server_error")
    log.error("Silk request failed", exc_info=exc)
    return SilkError(500, "Synthesis failed; the server log says why.", "server_error")


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


class SilkSession:
    """One socket session (see docs/ARCHITECTURE.md §15 for the frames and their rules):
    the first frame's voice holds until a frame changes it; one utterance plays at a time;
    `cancel` stops it (`cancelled`, reason cancel; ignored while idle: livekit's keepalive),
    new text interrupts it (`cancelled`, reason interrupt); `close` or a hang-up aborts."""

    def __init__(self, session: Session, ctx: ServeContext):
        self.session, self.ctx = session, ctx
        self.adapter, self.metrics, self.accepted = ctx.adapter, ctx.metrics, ctx.accepted
        self.voice = SilkVoice()
        self.current: asyncio.Task | None = None
        self.current_id: str | None = None
        self.last_frame = time.monotonic()

    @property
    def playing(self) -> bool:
        return self.current is not None and not self.current.done()

    async def run(self) -> None:
        recv: asyncio.Task | None = None
        try:
            while True:
                recv = recv or asyncio.ensure_future(self.session.ws.receive())
                waits = {recv, self.current} if self.playing else {recv}
                done, _ = await asyncio.wait(waits, timeout=None if self.playing else self._quiet_left(),
                                             return_when=asyncio.FIRST_COMPLETED)
                if recv not in done:
                    if not self.playing and not done:  # idle past the timeout, or too old
                        await self._time_out()
                        return
                    continue
                message, recv = recv.result(), None
                if message["type"] == "websocket.disconnect" or not await self._on_message(message):
                    return
        finally:
            if recv is not None:
                recv.cancel()
            await self._stop(reason=None)

    def _quiet_left(self) -> float:
        """Seconds until an idle session times out (or reaches its maximum age)."""
        now = time.monotonic()
        return max(0.0, min(self.last_frame + IDLE_TIMEOUT_S, self.session.opened + MAX_SESSION_AGE_S) - now)

    async def _time_out(self) -> None:
        old = time.monotonic() - self.session.opened >= MAX_SESSION_AGE_S
        message = (f"The session reached its maximum age of {MAX_SESSION_AGE_S / 60:.0f} minutes." if old else
                   f"No frame from the client for {IDLE_TIMEOUT_S:.0f} s.")
        await self.session.send_json({"type": "timeout", "message": message + " Open a new session with "
                                      "POST /v1/tts/ws-connect."})
        await self.session.close(CLOSE_NORMAL)

    async def _on_message(self, message: dict) -> bool:
        """Handle one client frame; False ends the session."""
        self.last_frame = time.monotonic()
        try:
            if message.get("text") is None:
                raise SilkError(400, "Binary frames are not accepted; send JSON text frames, e.g. "
                                     "{\"text\": \"Namaste!\"}.", "invalid_frame")
            try:
                fields = SilkFields.parse(json.loads(message["text"]))
            except ValueError:
                raise SilkError(400, "The frame is not valid JSON; send e.g. {\"text\": \"Namaste!\"} or "
                                     "{\"type\": \"cancel\"}.", "invalid_json") from None
            return await self._on_fields(fields)
        except SilkError as exc:  # a bad frame: say so; the session (and any playing utterance) goes on
            self.metrics.error(exc.code)
            await self.session.send_json(exc.frame())
            return True

    async def _on_fields(self, fields: SilkFields) -> bool:
        if fields.type == "cancel":
            await self._stop(reason="cancel")
            return True
        if fields.type == "close":
            await self._stop(reason=None)
            await self.session.close(CLOSE_NORMAL)
            return False
        if fields.type is not None:
            raise SilkError(400, f"Unknown frame type {fields.type!r}: use \"cancel\" or \"close\", or send text "
                                 "without a type.", "invalid_frame")
        if fields.model is not None:
            check_silk_model(fields.model, self.accepted)  # the model is fixed at ws-connect; only check it
        await self._stop(reason="interrupt")
        voice = self.voice.updated(fields)
        req = silk_request(fields, voice, self.adapter.voices, self.adapter.limits.max_chars,
                           self.ctx.default_max_new_tokens)
        self.voice = voice  # only a frame that made a valid request changes the session's voice
        self.current_id = request_id()
        self.current = asyncio.create_task(self._speak(req.with_(seed=resolve_seed(req.seed)), self.current_id))
        return True

    async def _stop(self, reason: str | None) -> None:
        """Stop the playing utterance (its row is freed), then say `cancelled` (reason None: say nothing)."""
        if not self.playing:
            return
        self.current.cancel()
        await asyncio.gather(self.current, return_exceptions=True)
        self.metrics.error("cancelled")
        if reason is not None:
            await self.session.send_json({"type": "cancelled", "reason": reason, "request_id": self.current_id})

    async def _speak(self, req: SynthesisRequest, rid: str) -> None:
        started, info, samples = time.perf_counter(), {}, 0
        pcm = make_encoder("pcm", self.adapter.sample_rate)
        pieces = self.adapter.stream(req, info)
        try:
            async with self.session.utterance():
                await self.session.send_json({"type": "queued", "queue_depth": self.adapter.stats().queue_depth,
                                              "request_id": rid})
                first = await first_piece(pieces, lambda: self.session.send_json(
                    {"type": "queued", "queue_depth": self.adapter.stats().queue_depth, "request_id": rid}))
                self.metrics.first_audio.observe(time.perf_counter() - started)
                async for piece in _chain(first, pieces):
                    samples += len(piece)
                    if not await self.session.send_audio(pcm.encode(piece)):
                        return
            seconds, elapsed = samples / self.adapter.sample_rate, time.perf_counter() - started
            self.metrics.request_done(200, "pcm", elapsed)
            await self.session.send_json({"type": "done", "request_id": rid, "audio_duration": round(seconds, 3),
                                          "rtf": round(elapsed / seconds, 4) if seconds else 0.0,
                                          "credits_used": 0, "seed": req.seed})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one error frame
            error = silk_error(exc)
            self.metrics.error(error.code)
            self.metrics.request_done(error.status, "pcm")
            await self.session.send_json({**error.frame(), "request_id": rid})
        finally:
            await pieces.aclose()


async def first_piece(pieces: AsyncIterator[np.ndarray], tick, every: float = QUEUED_EVERY_S) -> np.ndarray:
    """The first piece of a stream, calling `await tick()` every `every` seconds while it waits."""
    task = asyncio.ensure_future(anext(pieces, np.zeros(0, dtype=np.float32)))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            await tick()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _chain(first: np.ndarray, pieces: AsyncIterator[np.ndarray]) -> AsyncIterator[np.ndarray]:
    yield first
    async for piece in pieces:
        yield piece


async def _collect(pieces: AsyncIterator[np.ndarray], request: Request) -> list[np.ndarray] | None:
    """Every piece of a stream; None if the client hung up first (the stream is then closed)."""
    async def gather() -> list[np.ndarray]:
        return [piece async for piece in pieces]

    return await unless_disconnected(gather(), request)


def add_silk_routes(app: FastAPI, ctx: ServeContext) -> TokenStore:
    """The three Silk routes on `app` (the API key is checked in front, by the server's gate)."""
    tokens = TokenStore()
    adapter, metrics, sessions, accepted = ctx.adapter, ctx.metrics, ctx.sessions, ctx.accepted

    def silk_response(error: SilkError, rid: str) -> JSONResponse:
        metrics.error(error.code)
        metrics.request_done(error.status, "wav")
        return JSONResponse(error.body(), status_code=error.status, headers={**error.headers, REQUEST_ID_HEADER: rid})

    @app.post("/v1/tts")
    async def tts(request: Request) -> Response:
        rid, started = request_id(), time.perf_counter()
        try:
            fields = SilkFields.parse(await _json_body(request))
            check_silk_model(fields.model, accepted)
            req = silk_request(fields, SilkVoice().updated(fields), adapter.voices, adapter.limits.max_chars,
                               ctx.default_max_new_tokens)
            req = req.with_(seed=resolve_seed(req.seed))
            pieces = adapter.stream(req, {})
            try:
                audio = await _collect(pieces, request)
            finally:
                await pieces.aclose()
        except Exception as exc:  # noqa: BLE001 - one readable error body
            return silk_response(silk_error(exc), rid)
        if audio is None:
            metrics.error("client_disconnected")
            return Response(status_code=499)
        data = to_s16(np.concatenate(audio) if audio else np.zeros(0, np.float32)).tobytes()
        metrics.request_done(200, "wav", time.perf_counter() - started)
        return Response(wav_header(adapter.sample_rate, len(data)) + data, media_type="audio/wav",
                        headers={REQUEST_ID_HEADER: rid, SEED_HEADER: str(req.seed), "Cache-Control": "no-store"})

    @app.post("/v1/tts/ws-connect")
    async def ws_connect(request: Request) -> JSONResponse:
        rid = request_id()
        try:
            fields = SilkFields.parse(await _json_body(request))
            model = check_silk_model(fields.model, accepted)
        except SilkError as exc:
            return silk_response(exc, rid)
        return JSONResponse({"ws_url": ws_url(request), "token": tokens.mint(model), "request_id": rid},
                            headers={REQUEST_ID_HEADER: rid, "Cache-Control": "no-store"})

    @app.websocket("/v1/tts/ws")
    async def tts_ws(ws: WebSocket) -> None:
        if tokens.redeem(ws.query_params.get("token")) is None:
            error = SilkError(401, "The socket token is missing, used or expired; mint one with POST "
                                   "/v1/tts/ws-connect and connect within a minute.", "invalid_token")
            metrics.error(error.code)
            await deny(ws, 401, error.body())
            return
        async with sessions.session(ws) as session:
            if session is not None:
                await SilkSession(session, ctx).run()

    return tokens
