"""What the speech server's WebSocket sessions share: admission, drain, and audio out.

    sessions = SessionRegistry(max_sessions=128)
    async with sessions.session(ws) as session:       # SessionsFull / ShuttingDown before accept
        async with session.utterance():              # counted: SIGTERM waits for these to finish
            async for piece in adapter.stream(req, info):
                await session.send_audio(pcm.encode(piece))
        await session.send_json({"type": "done"})

Two protocols run on these sessions (`rumik_app.serve.silk.session`: Rumik's hosted-API socket;
`rumik_app.serve.text_in`: text streamed in, vLLM-Omni's protocol). Both take their audio
from `SpeechAdapter.stream`, the same scheduler rows and stream assembler as HTTP, so a
cancel or a hang-up frees the batch row the same way (closing the stream).

Drain (SIGTERM), as for HTTP: `SessionRegistry.drain` refuses new sessions and new
utterances, waits (up to the shutdown timeout) for the utterances already streaming, then
closes every session with 1012 ("service restart": reconnect elsewhere). uvicorn alone would
cut open sockets at once, mid-utterance.

Sends go through one lock per session: audio comes from a generating task while the receive
loop answers control frames, and a socket must not interleave two sends. A send to a socket
the client already closed is dropped (the session is ending anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketState

from rumik_app.engine.serving import RETRY_AFTER_S, ShuttingDown
from rumik_app.serve.protocol import DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_CLIENT

log = logging.getLogger(__name__)

# Audio frames to clients stay far below the smallest client limit (websockets' 1 MiB).
MAX_AUDIO_FRAME_BYTES = 48_000  # 1 s of 24 kHz s16 mono
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_RESTART = 1000, 1001, 1012
DRAIN_POLL_S = 0.05


class SessionsFull(RuntimeError):
    """Every session slot is taken (--max-sessions)."""

    retry_after = RETRY_AFTER_S


class Session:
    """One accepted socket: locked sends, and the utterances it is streaming."""

    def __init__(self, ws: WebSocket, registry: "SessionRegistry"):
        self.ws, self.registry = ws, registry
        self.address = client_address(ws)
        self.lock = asyncio.Lock()
        self.opened = time.monotonic()
        self.closed = False

    async def send_json(self, data: dict) -> bool:
        """Send a JSON text frame; False if the socket is gone."""
        return await self._send(self.ws.send_json, data)

    async def send_audio(self, data: bytes) -> bool:
        """Send audio as binary frames of at most MAX_AUDIO_FRAME_BYTES (whole samples)."""
        for start in range(0, len(data), MAX_AUDIO_FRAME_BYTES):
            if not await self._send(self.ws.send_bytes, data[start : start + MAX_AUDIO_FRAME_BYTES]):
                return False
        return True

    async def _send(self, send, payload) -> bool:
        async with self.lock:
            if self.closed or self.ws.application_state != WebSocketState.CONNECTED:
                return False
            try:
                await send(payload)
                return True
            except Exception:  # noqa: BLE001 - the client hung up mid-send: the session is ending
                self.closed = True
                return False

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        async with self.lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(Exception):  # already closed by the client
                await self.ws.close(code, reason)

    @contextlib.asynccontextmanager
    async def utterance(self) -> AsyncIterator[None]:
        """Count one utterance as streaming (drain waits for it); ShuttingDown while draining."""
        if self.registry.draining:
            raise ShuttingDown("The server is shutting down and takes no new requests; retry on another replica.")
        self.registry.streaming += 1
        try:
            yield
        finally:
            self.registry.streaming -= 1


class SessionRegistry:
    """Open sessions, at most `max_sessions`; their drain at shutdown (module docstring)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 max_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT):
        self.max_sessions, self.max_per_client = max_sessions, max_per_client
        self.open: set[Session] = set()
        self.streaming = 0
        self.draining = False

    @contextlib.asynccontextmanager
    async def session(self, ws: WebSocket, subprotocol: str | None = None) -> AsyncIterator[Session]:
        """Accept `ws` as a session; before accepting, answer 503 if full or draining."""
        refusal = self._refusal(client_address(ws))
        if refusal is not None:
            status, message, code = refusal
            await deny(ws, status, {"error": message, "message": message, "code": code},
                       headers={"Retry-After": str(RETRY_AFTER_S)})
            yield None
            return
        await ws.accept(subprotocol)
        session = Session(ws, self)
        self.open.add(session)
        try:
            yield session
        finally:
            self.open.discard(session)
            await session.close()

    def _refusal(self, address: str | None) -> tuple[int, str, str] | None:
        """(status, message, code) when a new session from `address` must be refused, else None."""
        if self.draining:
            return 503, "The server is shutting down; reconnect to another replica.", "shutting_down"
        if len(self.open) >= self.max_sessions:
            return 503, f"All {self.max_sessions} WebSocket sessions are in use; retry in a few seconds.", "overloaded"
        mine = sum(session.address == address for session in self.open)
        if self.max_per_client and mine >= self.max_per_client:
            message = (f"This address already has {mine} WebSocket sessions open, the most one client may hold "
                       "(--max-sessions-per-client); close one, or reuse it for the next utterance.")
            return 429, message, "too_many_sessions"
        return None

    async def drain(self, timeout: float) -> None:
        """Refuse new sessions and utterances, let streaming ones end, then close every session."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.streaming and time.monotonic() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        if self.streaming:
            log.warning("closing %d WebSocket utterances still streaming after %.0f s", self.streaming, timeout)
        await asyncio.gather(*(s.close(CLOSE_RESTART, "server restart") for s in list(self.open)))


def client_address(ws: WebSocket) -> str | None:
    """The client's address (a trusted proxy's X-Forwarded-For already applied by uvicorn)."""
    return ws.client.host if ws.client else None


async def deny(ws: WebSocket, status: int, body: dict, headers: dict | None = None) -> None:
    """Refuse a socket before accepting it, with an HTTP response (status + JSON body) where
    the server supports it (uvicorn does), else a plain close (the client sees 403)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse(body, status_code=status, headers=headers))
    else:
        await ws.close(code=1008)
