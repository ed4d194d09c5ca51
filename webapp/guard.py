"""The public Gradio apps' front door: an ASGI guard in front of Gradio (app.py and the
campaign rating server).

    guard = VisitorGuard.options(host="0.0.0.0", allowed_hosts=["tts.example.org"], share=False)
    demo.launch(..., app_kwargs=guard)        # `{"middleware": [...]}` for Gradio's FastAPI app

What it refuses, before Gradio sees the request:
- **URL fetches for visitors.** Gradio downloads a file input whose `path` is an http(s) URL
  server-side, whole, with no size limit (bypassing `max_file_size`), and `/file=https://...`
  streams any URL back: an open proxy. File inputs must be uploads; URL file routes and
  `/proxy=` get 403.
- **Large bodies.** Every API body (queue, call, login) is read at most `max_body` bytes;
  more is 413 before any JSON parsing. Uploads go to `/upload`, which Gradio caps per file
  (`max_file_size`); here an upload must declare its length, and one client address may
  upload at most `upload_budget` bytes an hour (429 after that), so nobody fills the disk.
- **Foreign hosts and origins.** The Host header must name this server (DNS rebinding: an
  attacker's domain that resolves to 127.0.0.1 reaches a local app that has no password), and a
  browser request with an Origin must come from one of those hosts. (Gradio's own CORS layer
  sits outside this one and answers preflights itself, echoing any origin for a public host;
  the request that follows is refused here, so nothing is read or done for another site.)
  IP literals are always accepted (rebinding needs a name), as are localhost, this machine's
  names, the Space's own host and `--allowed-host` entries (`*.example.org` allowed).
- **Cross-site cookies.** Gradio's login cookie is SameSite=None; it is rewritten to Lax,
  except on a Space, whose page embeds the app in an iframe of another site (there the Origin
  check does the work).
The client's address is kept for the request (`client_address()`), so the login throttle
can key failures on it.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import os
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from urllib.parse import unquote, urlsplit

from rumik_app.asgi import declared_length, header, read_body, replay, send_json

MAX_BODY_BYTES = 1 << 20  # a form's JSON: the Evaluate tab's references for 200 clips fit many times over
UPLOAD_BUDGET_BYTES = 2 << 30  # per client address and hour: 40 clips at the 50 MB limit
UPLOAD_WINDOW_S = 3600.0
MAX_TRACKED_CLIENTS = 10_000
SPACE_HOST_ENV, SPACE_ID_ENV = "SPACE_HOST", "SPACE_ID"  # set by Hugging Face on a Space
SHARE_HOSTS = ("*.gradio.live",)
LOCAL_NAMES = ("localhost",)
URL_ROUTE = re.compile(r"/(?:file=\s*(?:[a-z][a-z0-9+.-]*:)?//|proxy=)", re.IGNORECASE)
URL_VALUE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
UPLOAD_ROUTE = re.compile(r"/upload/?$")

_client: contextvars.ContextVar[str] = contextvars.ContextVar("rumik_client_address", default="")


def client_address() -> str:
    """The address of the client whose request is being handled here ("" outside a request)."""
    return _client.get()


def _host_name(value: str) -> str:
    """`Host`/origin authority -> lower-case host name without port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class HostRule:
    """Which host names this server answers to (see the module docstring)."""

    def __init__(self, names: Iterable[str]):
        self.exact = {n.lower().rstrip(".") for n in names if n and not n.startswith("*.")}
        self.suffixes = tuple(n.lower()[1:] for n in names if n.startswith("*."))

    def allows(self, name: str) -> bool:
        name = name.rstrip(".")
        return bool(name) and (_is_ip(name) or name in self.exact or name.endswith(self.suffixes))


def default_hosts(bind: str, allowed: Sequence[str] = (), share: bool = False,
                  environ: dict | None = None) -> list[str]:
    """localhost, this machine's names, the bind address, the Space's host, gradio.live with
    `share`, and the operator's --allowed-host entries."""
    env = os.environ if environ is None else environ
    names = [*LOCAL_NAMES, bind, socket.gethostname(), socket.getfqdn(), *allowed]
    if env.get(SPACE_HOST_ENV):
        names.append(env[SPACE_HOST_ENV])
    if share:
        names += SHARE_HOSTS
    return [n for n in names if n]


def _has_url_file(value) -> bool:
    """True when a JSON value holds a file object whose `path` is a URL (Gradio would fetch it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            path = item.get("path")
            if isinstance(path, str) and URL_VALUE.match(path):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class VisitorGuard:
    """Pure ASGI middleware; see the module docstring."""

    def __init__(self, app, hosts: Sequence[str], on_space: bool = False, max_body: int = MAX_BODY_BYTES,
                 upload_budget: int = UPLOAD_BUDGET_BYTES, clock=time.monotonic):
        self.app, self.rule, self.on_space, self.max_body = app, HostRule(hosts), on_space, max_body
        self.upload_budget, self._clock = upload_budget, clock
        self._uploads: OrderedDict[str, list[tuple[float, int]]] = OrderedDict()  # address -> (time, bytes)
        self._lock = threading.Lock()

    @classmethod
    def options(cls, host: str, allowed_hosts: Sequence[str] = (), share: bool = False,
                max_body: int = MAX_BODY_BYTES) -> dict:
        """`app_kwargs` for `Blocks.launch`: this guard in front of Gradio's routes."""
        from starlette.middleware import Middleware

        hosts = default_hosts(host, allowed_hosts, share)
        on_space = bool(os.environ.get(SPACE_ID_ENV))
        return {"middleware": [Middleware(cls, hosts=hosts, on_space=on_space, max_body=max_body)]}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        refusal = self._refusal(scope)
        if refusal is None and scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH") \
                and not UPLOAD_ROUTE.search(scope["path"]):
            body = await read_body(receive, self.max_body)
            if body is None:
                refusal = (413, f"The request is larger than {self.max_body // 1024} KB.")
            elif _has_url_file(_json(body)):
                refusal = (400, "File inputs must be uploaded; this app does not fetch URLs.")
            else:
                receive = replay(body, receive)
        if refusal is not None:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008})
            return await send_json(send, refusal[0], {"error": refusal[1], "detail": refusal[1]})
        token = _client.set((scope.get("client") or ("",))[0])
        try:
            await self.app(scope, receive, self._cookies(send))
        finally:
            _client.reset(token)

    def _refusal(self, scope) -> tuple[int, str] | None:
        host = _host_name(header(scope, b"host") or "")
        if not self.rule.allows(host):
            return 400, "Unknown host name for this server (start it with --allowed-host NAME to serve that name)."
        origin = header(scope, b"origin")
        if origin is not None and origin != "null" and not self.rule.allows(_host_name(urlsplit(origin).netloc)):
            return 403, "Requests from other sites are not allowed."
        if URL_ROUTE.search(unquote(scope.get("raw_path", b"").decode("latin-1") or scope["path"])) \
                or URL_ROUTE.search(scope["path"]):
            return 403, "This app does not fetch or proxy URLs."
        length = declared_length(scope)
        if scope["type"] == "http" and UPLOAD_ROUTE.search(scope["path"]) and scope["method"] == "POST":
            return self._upload_refusal((scope.get("client") or ("",))[0], length)
        if length is not None and length > self.max_body:
            return 413, f"The request is larger than {self.max_body // 1024} KB."
        return None

    def _upload_refusal(self, address: str, length: int | None) -> tuple[int, str] | None:
        """An upload must say how large it is, and fit its client's hourly budget (then counted)."""
        if length is None:
            return 411, "Uploads must declare their size (Content-Length)."
        now = self._clock()
        with self._lock:
            recent = [(t, n) for t, n in self._uploads.pop(address, []) if now - t < UPLOAD_WINDOW_S]
            if sum(n for _, n in recent) + length > self.upload_budget:
                self._uploads[address] = recent
                return 429, f"Upload limit reached: {self.upload_budget >> 20} MB an hour. Try again later."
            self._uploads[address] = recent + [(now, length)]
            while len(self._uploads) > MAX_TRACKED_CLIENTS:
                self._uploads.popitem(last=False)  # the longest unseen: its window is the oldest
        return None

    def _cookies(self, send):
        if self.on_space:  # embedded in huggingface.co's page: the cookie must cross sites
            return send

        async def rewritten(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [(k, _lax(v) if k.lower() == b"set-cookie" else v)
                                      for k, v in message.get("headers", [])]
            await send(message)

        return rewritten


def _lax(cookie: bytes) -> bytes:
    return re.sub(rb"(?i)samesite=none", b"SameSite=Lax", cookie)


def _json(body: bytes):
    try:
        return json.loads(body) if body.strip()[:1] in (b"{", b"[") else None
    except (ValueError, UnicodeDecodeError):
        return None
