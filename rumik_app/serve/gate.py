"""`RequestGate`: the speech server's API key and body cap, checked before FastAPI reads anything.

    app.add_middleware(RequestGate, api_key="KEY", metrics=metrics)    # what create_app does

Pure ASGI, in front of FastAPI: the API key of /v1 routes from the headers alone, and no body
over `max_body` bytes (413), each refused before any body is read or parsed, so a caller
without the key, or with a huge body, costs the server nothing. /health and /metrics stay
open for load balancers and scrapers. Admin routes (/v1/admin/, and changes to the voice
library: POST /v1/voices, DELETE /v1/voices/NAME, every /v1/voices/adaptations route) take the
admin key (--admin-key), never an API key, and are closed when the server has none. A voice
archive's and an adaptation's bodies are not read here: their declared length is checked, and
their routes read them incrementally under the same cap and deadline.
WebSocket upgrades to /v1 need the key too (as `Authorization: Bearer`), except Rumik's
socket, whose single-use token its route checks; a refused upgrade gets the HTTP 401.
Rumik's routes get their errors in Rumik's body shape.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Sequence

from rumik_app.asgi import declared_length, header, read_body, replay, send_json
from rumik_app.serve.errors import ApiError
from rumik_app.serve.metrics import ServerMetrics
from rumik_app.serve.protocol import (
    DEFAULT_BODY_TIMEOUT_S,
    MAX_BATCH_BODY_BYTES,
    MAX_JOB_BODY_BYTES,
    MAX_LEXICON_BODY_BYTES,
    OPEN_OWNER,
    PREPARER,
)
from rumik_app.voices.archive import MAX_ARCHIVE_BYTES, archive_too_large
from rumik_app.voices.makers import MAX_UPLOAD_BYTES, UPLOAD_TOO_LARGE

# A speech request is a few KB (input is at most SERVER_LIMITS.max_chars characters); nothing
# else in this API takes a body.
MAX_BODY_BYTES = 64 * 1024
SILK_PREFIX = "/v1/tts"  # Rumik's hosted-API routes (rumik_app.serve.silk): errors in its body shape
SILK_SOCKET = "/v1/tts/ws"  # its socket carries a token minted with the key, not the key itself
ADMIN_PREFIX = "/v1/admin/"  # operators' actions: the admin key only
VOICES_PATH = "/v1/voices"  # the voice library (serve.voices): reading it takes an API key, changing it the admin key
# Routes whose bodies may be larger than a speech request's: a lexicon upload (serve.lexicons), a long
# job's chapter (serve.jobs), a batch of requests (serve.openai.batch).
LARGE_BODIES = {"/v1/lexicons": MAX_LEXICON_BODY_BYTES, "/v1/audio/jobs": MAX_JOB_BODY_BYTES,
                "/v1/audio/speech/batch": MAX_BATCH_BODY_BYTES}
ADAPTATIONS_PATH = VOICES_PATH + "/adaptations"  # voice adaptations (serve.adaptations): the admin key, any method
# Routes that read their own body incrementally (to a file), under this cap and the body deadline.
STREAMED_BODIES = {VOICES_PATH: MAX_ARCHIVE_BYTES, ADAPTATIONS_PATH: MAX_UPLOAD_BYTES}


def key_error(authorization: str | None, api_key: str | Sequence[str] | None,
              flag: str = "--api-key") -> ApiError | None:
    """The 401 for an Authorization header that carries none of the keys `api_key` (one key or
    several; None: no key is set, everyone passes); `flag` names the option that sets them."""
    if api_key is None:
        return None
    if not authorization:
        return ApiError(401, "You didn't provide an API key. Send it as the header 'Authorization: Bearer KEY' "
                             "(the openai client: api_key=KEY).", code="missing_api_key")
    if matching_key(authorization, api_key) is None:
        return ApiError(401, f"Incorrect API key provided. Use the key the server was started with ({flag}).",
                        code="invalid_api_key")
    return None


def matching_key(authorization: str | None, keys: str | Sequence[str]) -> str | None:
    """The key (of `keys`) that `Authorization: Bearer KEY` carries, or None; constant time per key."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    found = None
    for key in (keys,) if isinstance(keys, str) else keys:
        if secrets.compare_digest(given.strip().encode(), key.encode()):
            found = key
    return found


def owner_id(key: str | None) -> str:
    """Who owns what a request stores (lexicons): a hash of its API key, never the key itself."""
    return OPEN_OWNER if key is None else "key_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def is_admin_route(method: str, path: str) -> bool:
    """Whether (method, path) is an operator's action: /v1/admin/, or a change to the voice library."""
    path = path.rstrip("/")
    voices = path == VOICES_PATH or path.startswith(VOICES_PATH + "/")
    adaptations = path == ADAPTATIONS_PATH or path.startswith(ADAPTATIONS_PATH + "/")
    return ((path + "/").startswith(ADMIN_PREFIX) or adaptations
            or (voices and method not in ("GET", "HEAD", "OPTIONS")))


def admin_error(authorization: str | None, admin_key: str | None) -> ApiError | None:
    """The 403 when the server has no admin key, the 401 for a header without it, else None."""
    if admin_key is None:
        return ApiError(403, "Admin routes are closed: start the server with --admin-key KEY (or RUMIK_ADMIN_KEY), "
                             "a key of its own, not an API key, and send 'Authorization: Bearer ADMIN_KEY'.",
                        code="admin_closed")
    return key_error(authorization, admin_key, flag="--admin-key")


class RequestGate:
    """The key and body checks in front of the app (see the module docstring)."""

    def __init__(self, app, api_key: str | Sequence[str] | None, metrics: ServerMetrics,
                 max_body: int = MAX_BODY_BYTES, admin_key: str | None = None,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT_S):
        self.app, self.metrics, self.max_body = app, metrics, max_body
        self.api_key = (api_key,) if isinstance(api_key, str) else (tuple(api_key) if api_key else None)
        self.admin_key, self.body_timeout = admin_key, body_timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            PREPARER.set(client[0] if client else None)  # by address; a matching key's owner replaces it
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = self._check_headers(scope)
        has_body = scope["method"] in ("POST", "PUT", "PATCH")
        if refused is None and has_body and not self._streamed(scope):
            try:
                async with asyncio.timeout(self.body_timeout):
                    body = await read_body(receive, self._body_cap(scope))
            except TimeoutError:
                refused = self._too_slow()
            else:
                refused = self._too_large(scope) if body is None else None
                receive = receive if body is None else replay(body, receive)
                has_body = body is None  # what is left unread
        if refused is not None:
            self.metrics.error(refused.code)
            self.metrics.request_done(refused.status, "none")
            # Refused before its body was read: close rather than keep a connection that owes bytes.
            headers = {"Connection": "close", **refused.headers} if has_body else refused.headers
            return await send_json(send, refused.status, refused.body(silk=scope["path"].startswith(SILK_PREFIX)),
                                   headers)
        await self.app(scope, receive, send)

    async def _websocket(self, scope, receive, send) -> None:
        path = scope["path"]
        refused = None
        if path.startswith("/v1") and path != SILK_SOCKET:
            refused = key_error(header(scope, b"authorization"), self.api_key)
            if refused is None:
                self._mark_owner(scope, header(scope, b"authorization"))
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
        if is_admin_route(scope["method"], path):
            error = admin_error(authorization, self.admin_key)
            if error is not None:
                return error
        elif path.startswith("/v1"):
            error = key_error(authorization, self.api_key)
            if error is not None:
                return error
            self._mark_owner(scope, authorization)
        length = declared_length(scope)
        return self._too_large(scope) if length is not None and length > self._body_cap(scope) else None

    def _mark_owner(self, scope, authorization: str | None) -> None:
        key = matching_key(authorization, self.api_key) if self.api_key else None
        scope.setdefault("state", {})["owner"] = owner_id(key)
        if key is not None:  # what this request's text preparation counts against (serve.adapters)
            PREPARER.set(owner_id(key))

    def _body_cap(self, scope) -> int:
        path = scope["path"].rstrip("/")
        if path in STREAMED_BODIES:
            return STREAMED_BODIES[path]
        return next((cap for prefix, cap in LARGE_BODIES.items() if path == prefix or path.startswith(prefix + "/")),
                    self.max_body)

    def _streamed(self, scope) -> bool:
        return scope["path"].rstrip("/") in STREAMED_BODIES

    def _too_slow(self) -> ApiError:
        return ApiError(408, f"The request body did not arrive within {self.body_timeout:g} s of its headers; send it "
                             "at once (a speech request is a few KB).", code="request_timeout",
                        headers={"Connection": "close"})

    def _too_large(self, scope) -> ApiError:
        if self._streamed(scope):
            message = str(archive_too_large()) if scope["path"].rstrip("/") == VOICES_PATH else UPLOAD_TOO_LARGE
            return ApiError(413, message, code="request_too_large", headers={"Connection": "close"})
        cap = self._body_cap(scope)
        what = "a speech request is a few KB" if cap == self.max_body else "split the upload"
        return ApiError(413, f"The request body is larger than {cap // 1024} KB; {what}.", code="request_too_large")
