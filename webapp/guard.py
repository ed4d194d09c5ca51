"""The public Gradio apps' front door: an ASGI guard in front of Gradio (app.py and the
campaign rating server).

    demo.queue(max_size=64, api_open=False)
    QueueFairness().install(demo)             # per-session and per-address shares of the queue
    guard = VisitorGuard.options(host="0.0.0.0", allowed_hosts=["tts.example.org"], share=False)
    launch_app(demo, trusted_proxies(None), ..., app_kwargs=guard)  # X-Forwarded-For from nobody
    # (a Space: its proxy); app_kwargs `{"middleware": [...]}` goes to Gradio's FastAPI app

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
- **Bodies the server would read differently.** Starlette's `request.json()` decodes UTF-8
  with a byte-order mark, UTF-16 and UTF-32 as well as UTF-8 (`json.detect_encoding`), so an
  API body is read here exactly as the server reads it, and one that is not plain UTF-8 is
  refused (400): a URL hidden in UTF-16 would otherwise pass the check above and be fetched.

The client's address is kept for the request (`client_address()`), so the login throttle
can key failures on it. It is the address uvicorn gives the request: the peer's, or, when the
peer is a proxy the operator named (`--forwarded-allow-ips`, `trusted_proxies`), the rightmost
X-Forwarded-For entry that is not one of those proxies. uvicorn trusts 127.0.0.1 by default,
so any local client could pick its own address; `proxy_settings` trusts nobody unless told
(on a Space: the platform's private ranges, `SPACE_PROXY_NETWORKS`). Gradio 6.31 builds
`uvicorn.Config` itself without `forwarded_allow_ips`, which then reads $FORWARDED_ALLOW_IPS;
`proxy_settings` sets that variable for the launch only (a value already in the environment,
e.g. a container image's "*", is not believed: the flag is the one way to name proxies). IPv6
clients are keyed by their /64 (`address_key`): one host is usually given a whole /64.

**Fair shares of Gradio's queue** (`QueueFairness`). Gradio's queue holds at most
`max_size` jobs for everyone together, so one visitor could fill it and every other visitor
got "Queue is full". Each browser session (Gradio's `session_hash`) may have at most
`MAX_JOBS_PER_SESSION` jobs waiting or running, and each client address `MAX_JOBS_PER_ADDRESS`
(session hashes are the client's to choose, addresses are not); one more join is refused with
429 and a message in Gradio's error shape (`{"detail": ...}`, which the page shows), while other
visitors join as before. The mechanism: `QueueFairness.install` wraps the queue's `push`
(Gradio 6.31's `Queue.push(body, request, username)`, awaited by every route that queues a job:
`/queue/join`, `/call/{api_name}`) and counts the visitor's jobs in the queue's own table of
live events (`Queue.event_ids_to_events`: an event enters at `push` and leaves when it finishes,
is cancelled or its session closes), plus the visitor's joins still inside `push`. Gradio's
own bookkeeping is the source of truth, so a job that ends in any way frees its place; nothing
here has to follow the event stream (the ASGI guard could count joins, but would see a job end
only by parsing every session's SSE stream). Gradio opens `/run/{api_name}` to queued functions
off a Space (`api_open` defaults to True there), which would run them outside the queue and its
limits: the apps queue with `api_open=False`.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import json
import os
import re
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from rumik_app.asgi import declared_length, header, read_body, replay, send_json
from rumik_app.environment import environment
from rumik_app.errors import RumikError

MAX_BODY_BYTES = 1 << 20  # a form's JSON: the Evaluate tab's references for 200 clips fit many times over
UPLOAD_BUDGET_BYTES = 2 << 30  # per client address and hour: 40 clips at the 50 MB limit
UPLOAD_WINDOW_S = 3600.0
MAX_TRACKED_CLIENTS = 10_000
MAX_JOBS_PER_SESSION = 4  # jobs one browser session may have waiting or running in Gradio's queue
MAX_JOBS_PER_ADDRESS = 8  # ... and one client address, over all its sessions (a NAT shares one)
IPV6_CLIENT_PREFIX = 64  # one IPv6 client is keyed by its /64 (a host is usually given a whole /64)
SPACE_HOST_ENV, SPACE_ID_ENV = "SPACE_HOST", "SPACE_ID"  # set by Hugging Face on a Space
# On a Space every request arrives through the platform's proxies, from its private network;
# they append the client's address to X-Forwarded-For, so the client is the rightmost entry
# outside these ranges. (A visitor's own X-Forwarded-For entries stand left of it: ignored.)
SPACE_PROXY_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
FORWARDED_ALLOW_IPS_ENV = "FORWARDED_ALLOW_IPS"  # what uvicorn.Config reads when given no forwarded_allow_ips
SHARE_HOSTS = ("*.gradio.live",)
LOCAL_NAMES = ("localhost",)
URL_ROUTE = re.compile(r"/(?:file=\s*(?:[a-z][a-z0-9+.-]*:)?//|proxy=)", re.IGNORECASE)
URL_VALUE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
UPLOAD_ROUTE = re.compile(r"/upload/?$")
PLAIN_JSON = "utf-8"  # json.detect_encoding's name for UTF-8 without a byte-order mark
NOT_UTF8 = "Send the request body as UTF-8 JSON, without a byte-order mark."
SESSION_FULL = ("Your session already has {n} requests waiting or running; wait for one to finish, then try "
                "again.")
ADDRESS_FULL = ("Your network address already has {n} requests waiting or running; wait for one to finish, then "
                "try again.")

_client: contextvars.ContextVar[str] = contextvars.ContextVar("rumik_client_address", default="")


class ProxyConfigError(RumikError, ValueError):
    """A --forwarded-allow-ips entry that is not an address or network; the message names the fix."""


def client_address() -> str:
    """The address of the client whose request is being handled here ("" outside a request)."""
    return _client.get()


def address_key(address: str | None) -> str:
    """The key one client is counted under: an IPv4 address as it is, an IPv6 address as its
    /64 network (an IPv4-mapped one as the IPv4 address), anything else (a test's "testclient",
    "") as given."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return address or ""
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(ip)


def trusted_proxies(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The proxies whose X-Forwarded-For is believed, as uvicorn reads them (comma-separated
    addresses and networks): `flag` (--forwarded-allow-ips) if given, else on a Space the
    platform's private ranges (SPACE_PROXY_NETWORKS), else "" (nobody). Raises ProxyConfigError
    for an entry that is neither an address nor a network ("*" included: name the proxies)."""
    env = os.environ if environ is None else environ
    if flag is None:
        return ",".join(SPACE_PROXY_NETWORKS) if env.get(SPACE_ID_ENV) else ""
    entries = [e.strip() for e in flag.split(",") if e.strip()]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ProxyConfigError(f"--forwarded-allow-ips: {entry!r} is not an IP address or network; name your "
                                   "proxies, e.g. --forwarded-allow-ips 10.0.0.5,172.16.0.0/12.") from None
    return ",".join(entries)


@contextlib.contextmanager
def proxy_settings(proxies: str) -> Iterator[None]:
    """Around `Blocks.launch`: uvicorn believes X-Forwarded-For from `proxies` only ("" = from
    nobody). Gradio builds `uvicorn.Config` without `forwarded_allow_ips`, so uvicorn reads
    $FORWARDED_ALLOW_IPS there (default 127.0.0.1); it is set for the launch and restored after."""
    with environment({FORWARDED_ALLOW_IPS_ENV: proxies}):
        yield


def launch_app(demo, proxies: str, **launch_kwargs):
    """`demo.launch(**launch_kwargs)` with X-Forwarded-For believed from `proxies` only
    (`proxy_settings`), for both public apps. Gradio's "is localhost reachable" probe is skipped
    (`_frontend=False`, its only effect in Gradio 6.31): it is one HEAD with a 3-s timeout, made
    for notebooks whose localhost is unreachable, and on a busy machine it times out and raises
    after the server is up (the socket is listening once `launch` is past uvicorn's start)."""
    with proxy_settings(proxies):
        return demo.launch(_frontend=False, **launch_kwargs)


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


def body_refusal(body: bytes) -> tuple[int, str] | None:
    """Why an API body (not an upload) is refused, or None. It is read as Starlette's
    `request.json()` reads it (`json.loads` on the bytes); anything but plain UTF-8 is refused
    first, so no encoding can carry a URL past the check."""
    if json.detect_encoding(body) != PLAIN_JSON:
        return 400, NOT_UTF8
    if _has_url_file(_json(body)):
        return 400, "File inputs must be uploaded; this app does not fetch URLs."
    return None


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
            else:
                refusal, receive = body_refusal(body), replay(body, receive)
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
            return self._upload_refusal(address_key((scope.get("client") or ("",))[0]), length)
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


class QueueFairness:
    """Per-session and per-address shares of Gradio's queue (see the module docstring): a
    visitor's join beyond `per_session` jobs of its session, or `per_address` of its address,
    waiting or running, is refused with 429; nobody else's is."""

    def __init__(self, per_session: int = MAX_JOBS_PER_SESSION, per_address: int = MAX_JOBS_PER_ADDRESS):
        self.per_session, self.per_address = per_session, per_address
        self._joining: Counter[tuple[str, str]] = Counter()  # (kind, key) -> its joins still inside push

    def install(self, blocks) -> None:
        """Wrap the queue of `blocks` (after `blocks.queue(...)`). RuntimeError, naming what to
        update, when this Gradio's queue lacks what the wrapper relies on."""
        queue = getattr(blocks, "_queue", None)
        if not callable(getattr(queue, "push", None)) or not isinstance(getattr(queue, "event_ids_to_events", None),
                                                                        dict):
            raise RuntimeError("Gradio's queue has no push() and event_ids_to_events (webapp.guard.QueueFairness "
                               "was written for Gradio 6.31): update QueueFairness for this Gradio version.")
        original = queue.push

        async def push(body, request, username=None, **kwargs):
            keys = _job_keys(getattr(body, "session_hash", None), request)
            refusal = self.refusal(keys, list(queue.event_ids_to_events.values()))
            if refusal is not None:
                from fastapi import HTTPException

                raise HTTPException(status_code=429, detail=refusal)
            self._joining.update(keys)  # counted at once: a parallel join sees this one (no await in between)
            try:
                return await original(body=body, request=request, username=username, **kwargs)
            finally:
                for key in keys:
                    self._joining[key] -= 1
                    if self._joining[key] <= 0:
                        del self._joining[key]

        queue.push = push

    def refusal(self, keys: list[tuple[str, str]], events: Iterable) -> str | None:
        """The message refusing one more job for `keys` (its session and address), or None.
        `events`: the queue's live events (waiting or running)."""
        live = Counter(key for event in events for key in _job_keys(event.session_hash, event.request))
        for kind, key in keys:
            limit, message = ((self.per_session, SESSION_FULL) if kind == "session"
                              else (self.per_address, ADDRESS_FULL))
            if live[kind, key] + self._joining[kind, key] >= limit:
                return message.format(n=limit)
        return None


def _job_keys(session_hash: str | None, request) -> list[tuple[str, str]]:
    """What a job counts against: its session (when the client named one) and its client's address."""
    client = getattr(request, "client", None)
    keys = [("address", address_key(getattr(client, "host", None) or ""))]
    return [("session", session_hash), *keys] if session_hash else keys


def _lax(cookie: bytes) -> bytes:
    return re.sub(rb"(?i)samesite=none", b"SameSite=Lax", cookie)


def _json(body: bytes):
    """The body as the server parses it (`json.loads` on the bytes), when it is a JSON object or array."""
    try:
        return json.loads(body) if body.strip()[:1] in (b"{", b"[") else None
    except (ValueError, UnicodeDecodeError):
        return None
