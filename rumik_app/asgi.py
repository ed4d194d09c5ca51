"""Small pure-ASGI pieces for guarding a public HTTP app before its framework runs.

    body = await read_body(receive, limit=64 * 1024)      # None: larger than the limit
    if body is None:
        return await send_json(send, 413, {"error": {"message": "Request body too large."}})
    await app(scope, replay(body, receive), send)         # the app reads the same bytes

Both public servers use them: the speech server (`rumik_app.serve.gate.RequestGate`: body cap
and API key before FastAPI parses anything, and its routes' `unless_disconnected`) and the
Gradio apps (`webapp.guard`). No dependencies beyond the standard library. A guard
runs in front of the framework, so a body is never parsed, nor even fully read, when it is
larger than the route allows or the caller is not allowed to send one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def header(scope: dict, name: bytes) -> str | None:
    """The first value of a request header (name in lower case), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def declared_length(scope: dict) -> int | None:
    """Content-Length as sent (None when absent or not a number)."""
    value = header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None as soon as it passes `limit` bytes (the rest is not read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app `body` (already read from `receive`), then passes the
    original's messages on (the disconnect, when the client goes: streaming responses wait for it)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def send_json(send: Send, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
    """A complete JSON response."""
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


DISCONNECT_POLL_S = 0.25  # how often a request still waiting for its audio checks its client


async def unless_disconnected(awaitable: Awaitable, request, poll: float = DISCONNECT_POLL_S):
    """`await awaitable`, unless the HTTP client (a Starlette Request) hangs up first: then it
    is cancelled and the result is None. Starlette does not cancel a handler whose client
    went away, so a route that waits for audio checks for itself."""
    task = asyncio.ensure_future(awaitable)
    while True:
        done, _ = await asyncio.wait({task}, timeout=poll)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return None
