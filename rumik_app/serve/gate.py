"""`RequestGate`: the speech server's API key and body cap, checked before FastAPI reads anything.

    app.add_middleware(RequestGate, api_key="KEY", metrics=metrics)    # what create_app does

Pure ASGI, in front of FastAPI: the API key of /v1 routes from the headers alone, and no body
over `max_body` bytes (413), each refused before any body is read or parsed, so a caller
without the key, or with a huge body, costs the server nothing. /health and /metrics stay
open for load balancers and scrapers. Admin routes (/v1/admin/) take the admin key
(--admin-key), never an API key, and are closed when the server has none. WebSocket upgrades to /v1 need the key too (as
`Authorization: Bearer`), except Rumik's socket, whose single-use token its route checks; a
refused upgrade gets the HTTP 401. Rumik's routes get their errors in Rumik's body shape.
"""

from __future__ import annotations

import asyncio
import json
import secrets

from rumik_app.asgi import declared_length, header, read_body, replay, send_json
from rumik_app.serve.errors import ApiError
from rumik_app.serve.metrics import ServerMetrics
from rumik_app.serve.protocol import DEFAULT_BODY_TIMEOUT_S

# A speech request is a few KB (input is at most SERVER_LIMITS.max_chars characters); nothing
# else in this API takes a body.
MAX_BODY_BYTES = 64 * 1024
SILK_PREFIX = "/v1/tts"  # Rumik's hosted-API routes (rumik_app.serve.silk): errors in its body shape
SILK_SOCKET = "/v1/tts/ws"  # its socket carries a token minted with the key, not the key itself
ADMIN_PREFIX = "/v1/admin/"  # operators' actions: the admin key only


def key_error(authorization: str | None, api_key: str | None, flag: str = "--api-key") -> ApiError | None:
    """The 401 for an Authorization header that does not carry `api_key` (None: it does, or no
    key is set); `flag` names the option that sets the key."""
    if api_key is None:
        return None
    scheme, _, given = (authorization or "").partition(" ")
    if not authorization:
        return ApiError(401, "You didn't provide an API key. Send it as the header 'Authorization: Bearer KEY' "
                             "(the openai client: api_key=KEY).", code="missing_api_key")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), api_key.encode()):
        return ApiError(401, f"Incorrect API key provided. Use the key the server was started with ({flag}).",
                        code="invalid_api_key")
    return None


def admin_error(authorization: str | None, admin_key: str | None) -> ApiError | None:
    """The 403 when the server has no admin key, the 401 for a header without it, else None."""
    if admin_key is None:
        return ApiError(403, "Admin routes are closed: start the server with --admin-key KEY (or RUMIK_ADMIN_KEY), "
                             "a key of its own, not an API key, and send 'Authorization: Bearer ADMIN_KEY'.",
                        code="admin_closed")
    return key_error(authorization, admin_key, flag="--admin-key")


class RequestGate:
    """The key and body checks in front of the app (see the module docstring)."""

    def __init__(self, app, api_key: str | None, metrics: ServerMetrics, max_body: int = MAX_BODY_BYTES,
                 admin_key: str | None = None, body_timeout: float = DEFAULT_BODY_TIMEOUT_S):
        self.app, self.api_key, self.metrics, self.max_body = app, api_key, metrics, max_body
        self.admin_key, self.body_timeout = admin_key, body_timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = self._check_headers(scope)
        if refused is None and scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                async with asyncio.timeout(self.body_timeout):
                    body = await read_body(receive, self.max_body)
            except TimeoutError:
                refused = self._too_slow()
            else:
                refused = self._too_large() if body is None else None
                receive = receive if body is None else replay(body, receive)
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
        path, authorization = scope["path"], header(scope, b"authorization")
        if path.startswith(ADMIN_PREFIX):
            error = admin_error(authorization, self.admin_key)
            if error is not None:
                return error
        elif path.startswith("/v1"):
            error = key_error(authorization, self.api_key)
            if error is not None:
                return error
        length = declared_length(scope)
        return self._too_large() if length is not None and length > self.max_body else None

    def _too_slow(self) -> ApiError:
        return ApiError(408, f"The request body did not arrive within {self.body_timeout:g} s of its headers; send it "
                             "at once (a speech request is a few KB).", code="request_timeout",
                        headers={"Connection": "close"})

    def _too_large(self) -> ApiError:
        return ApiError(413, f"The request body is larger than {self.max_body // 1024} KB; a speech request is a few "
                             "KB.", code="request_too_large")
