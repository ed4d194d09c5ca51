"""Who may see what in `app.py`: the admin password that guards results and exports, and the
`--auth` logins that close the whole app.

Library module (no command line)::

    admin = AdminGate.from_sources(args.admin_password)   # --admin-password, else $RUMIK_ADMIN_PASSWORD
    admin.require(password_from_the_form, "Exporting the ratings")   # AccessDenied unless it matches
    logins = read_logins(["asha:s3cret"], "logins.txt")     # --auth USER:PASS ..., --auth-file FILE, $RUMIK_APP_AUTH
    demo.launch(auth=LoginCheck(logins).acheck)             # async: a held try holds no thread

No admin password configured (local use) means results and exports are open to everyone who
can reach the app, as before. Passwords are compared in constant time (`hmac.compare_digest`)
and never logged or echoed. The campaign logins of a later issue build on `AdminGate`.

Guessing is slowed by `GuessThrottle`, and **a correct password always gets in**: a try is
held (waits) before its password is checked, it is not refused, so the real user of a name is
slowed, never locked out, by someone else's guessing. What a try waits:
- **its own name from its own address** (the pair): after 5 wrong passwords in a row, each
  further try waits for a slot that is 1 s after the last, doubling up to 1 min. Tries of one
  pair take slots one after another (each try is counted before its password is checked, under
  one lock), so parallel tries cannot share a slot; a try whose slot would be more than 1 min
  away is refused unchecked (only a pair's own parallel flood gets there);
- **the name from all addresses** (distributed guessing) and **the address over all names**
  (inventing names, or password spraying): after 20 wrong passwords for the name, or 30 from
  the address, each try also waits 1 s, doubling, but never more than 5 s
  (`SHARED_MAX_WAIT_S`): these keys are shared with innocent users (a NAT, a Space's proxy),
  so what they add is short. (Many addresses guessing one name each get their own pair's
  slots: spreading over addresses is what the name's wait slows, not what it stops.)
A right password starts its pair afresh and uncounts the try from the name and address. The
counts (one table, `MAX_TRACKED_KEYS` entries) forget the least recently used entry to make
room, and an entry quiet for `QUIET_RESET_S`; newcomers are never refused. IPv6 clients are
counted by their /64 (`webapp.guard.address_key`).

Where a try waits: Gradio awaits an async `auth=` in its login route, so `LoginCheck.acheck`
(and `throttled_auth` around the campaign's login) waits in the event loop, holding no thread;
Gradio calls a plain `auth=` callable on the event loop itself, where a wait would stall the
server. A synchronous `check` (the admin password form, on a Gradio worker thread) waits at
most `SYNC_MAX_HOLD_S` and is refused beyond that, with the time to try again.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import inspect
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.common import UserError
from webapp.guard import address_key, client_address

log = logging.getLogger(__name__)

ADMIN_PASSWORD_ENV = "RUMIK_ADMIN_PASSWORD"
AUTH_ENV = "RUMIK_APP_AUTH"  # lines of USER:PASS, like --auth-file (a Space secret)
MIN_ADMIN_PASSWORD_CHARS = 12  # shorter ones work, with a warning: the password form can be tried over HTTP
FREE_FAILURES = 5          # wrong passwords in a row for one name and address before its tries wait (typos are free)
NAME_FREE_FAILURES = 20    # wrong passwords for one name, over all addresses, before every try on it waits
ADDRESS_FREE_FAILURES = 30  # wrong passwords from one address, over all names, before its tries wait
FIRST_BACKOFF_S = 1.0      # the first wait; it doubles with every further failure ...
MAX_BACKOFF_S = 60.0       # ... up to this for a name at one address: the longest a try is held
SHARED_MAX_WAIT_S = 5.0    # ... and up to this for a name or an address (shared with innocent users)
SYNC_MAX_HOLD_S = SHARED_MAX_WAIT_S  # the longest a synchronous check holds its thread; longer: refused
QUIET_RESET_S = 900.0      # an entry without a try for this long starts afresh
MAX_TRACKED_KEYS = 50_000  # entries of the table (~250 bytes each); the least recently used goes first
ADMIN_FORM_KEY = "\0admin-form"  # the admin password form's name (no user name can contain NUL)
MAX_NAME_CHARS = 256

# Set while `GuessThrottle.acheck` checks a try that has waited: (throttle, name key). A
# synchronous `check` of the same name on that throttle inside it (a thread the check runs on
# copies this context) checks at once; the outer call counts the try.
_waited: contextvars.ContextVar[tuple[object, str] | None] = contextvars.ContextVar("rumik_waited_try", default=None)


class AccessDenied(UserError):
    """The visitor lacks the password an action needs; the message says where to enter it."""


class LoginError(RumikError, ValueError):
    """A malformed --auth / --auth-file / $RUMIK_APP_AUTH entry; the message names the fix."""


def same_secret(supplied: str | None, expected: str) -> bool:
    """Constant-time comparison of two secrets (UTF-8 bytes, so any script compares correctly)."""
    return hmac.compare_digest((supplied or "").encode("utf-8"), expected.encode("utf-8"))


@dataclass(slots=True)
class _Entry:
    failures: int = 0     # wrong passwords counted (a try counts before it is checked)
    last: float = 0.0     # time of the last try
    next_at: float = 0.0  # pairs: the earliest slot of the next try (tries of a pair take slots in turn)


@dataclass(frozen=True)
class Hold:
    """One try's place: its keys (pair, name, address), how long it waits before its password
    is checked, and whether it is refused unchecked instead."""

    keys: tuple[str, str, str]
    wait_s: float
    refused: bool = False


class GuessThrottle:
    """Slows password guessing without locking anyone out (see the module docstring);
    thread-safe. `sleep`/`asleep` wait (injectable for tests, like `clock`); `held` and
    `refused` count the tries that waited and the tries refused unchecked."""

    def __init__(self, free_failures: int = FREE_FAILURES, first_backoff_s: float = FIRST_BACKOFF_S,
                 max_backoff_s: float = MAX_BACKOFF_S, clock: Callable[[], float] = time.monotonic,
                 address_free_failures: int = ADDRESS_FREE_FAILURES, max_keys: int = MAX_TRACKED_KEYS,
                 name_free_failures: int = NAME_FREE_FAILURES, shared_max_wait_s: float = SHARED_MAX_WAIT_S,
                 sleep: Callable[[float], None] = time.sleep,
                 asleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.free_failures, self.first_backoff_s, self.max_backoff_s = free_failures, first_backoff_s, max_backoff_s
        self.address_free_failures, self.name_free_failures = address_free_failures, name_free_failures
        self.shared_max_wait_s, self.max_keys = shared_max_wait_s, max_keys
        self._clock, self._sleep, self._asleep = clock, sleep, asleep
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self.held = self.refused = 0

    @staticmethod
    def key(username: str | None) -> str:
        return (username or "").casefold()[:MAX_NAME_CHARS]

    def _keys(self, name: str, address: str | None) -> tuple[str, str, str]:
        """(pair, name, address) keys of a try; address None: this request's client."""
        where = address_key(client_address() if address is None else address)
        return f"{self.key(name)}\0{where}", f"\0name\0{self.key(name)}", f"\0address\0{where}"

    def _backoff_s(self, failures: int, free: int) -> float:
        """The wait after `failures` wrong passwords, `free` of them free (uncapped but by max_backoff_s)."""
        extra = failures - free
        return 0.0 if extra < 0 else min(self.max_backoff_s, self.first_backoff_s * 2.0 ** extra)

    def _shared_wait_s(self, by_name: _Entry, by_address: _Entry) -> float:
        return min(self.shared_max_wait_s, max(self._backoff_s(by_name.failures, self.name_free_failures),
                                               self._backoff_s(by_address.failures, self.address_free_failures)))

    def _entry(self, key: str, now: float, create: bool = True) -> _Entry:
        """The entry of `key`, most recently used now (a fresh one if none, or quiet for QUIET_RESET_S)."""
        entry = self._entries.get(key)
        if entry is None or (now - entry.last > QUIET_RESET_S and entry.next_at <= now):
            entry = _Entry(last=now)
            if not create:
                return entry
            self._entries[key] = entry
        self._entries.move_to_end(key)
        return entry

    def begin(self, name: str, address: str | None = None, max_hold_s: float | None = None) -> Hold:
        """Count a try (as a failure, until `end` says otherwise) and give it its wait; refused
        (not counted) when its slot is more than `max_hold_s` (default max_backoff_s) away."""
        keys = self._keys(name, address)
        limit = self.max_backoff_s if max_hold_s is None else max_hold_s
        with self._lock:
            now = self._clock()
            pair, by_name, by_address = (self._entry(k, now) for k in keys)
            start = max(now + self._shared_wait_s(by_name, by_address), pair.next_at)
            if start - now > limit:
                self.refused += 1
                self._evict()
                return Hold(keys, start - now, refused=True)
            for entry in (pair, by_name, by_address):
                entry.failures, entry.last = entry.failures + 1, now
            pair.next_at = start + self._backoff_s(pair.failures, self.free_failures)
            if start > now:
                self.held += 1
            if pair.failures == self.free_failures:
                log.warning("%d wrong passwords in a row for one login: its further tries wait", pair.failures)
            self._evict()
        return Hold(keys, start - now)

    def end(self, hold: Hold, ok: bool) -> None:
        """Settle a try: a right password starts its pair afresh and uncounts it from the name
        and the address; a wrong one stays counted."""
        if hold.refused or not ok:
            return
        with self._lock:
            self._entries.pop(hold.keys[0], None)
            for key in hold.keys[1:]:
                entry = self._entries.get(key)
                if entry is not None:
                    entry.failures = max(0, entry.failures - 1)

    def _evict(self) -> None:
        """Room (under the lock): the least recently used entries go; newcomers never wait for room."""
        while len(self._entries) > self.max_keys:
            self._entries.popitem(last=False)

    def wait_s(self, name: str, address: str | None = None) -> float:
        """Seconds a try of `name` from `address` (default: this request's) would wait now (0: none)."""
        keys = self._keys(name, address)
        with self._lock:
            now = self._clock()
            pair, by_name, by_address = (self._entry(k, now, create=False) for k in keys)
            return max(0.0, max(now + self._shared_wait_s(by_name, by_address), pair.next_at) - now)

    def check(self, name: str, verify: Callable[[], bool], address: str | None = None) -> bool:
        """`verify()` after the try's wait, on this thread (at most SYNC_MAX_HOLD_S; a longer
        wait is refused: False, unchecked). Inside `acheck` for the same name, `verify()` at once."""
        if _waited.get() == (self, self.key(name)):
            return bool(verify())
        hold = self.begin(name, address, max_hold_s=min(SYNC_MAX_HOLD_S, self.max_backoff_s))
        if hold.refused:
            return False
        if hold.wait_s > 0:
            self._sleep(hold.wait_s)
        ok = False
        try:
            ok = bool(verify())
        finally:
            self.end(hold, ok)
        return ok

    async def acheck(self, name: str, verify: Callable[[], bool | Awaitable[bool]], address: str | None = None) -> bool:
        """`verify()` (a bool, or an awaitable of one) after the try's wait, awaited in the event
        loop; False, unchecked, when the try is refused."""
        hold = self.begin(name, address)
        if hold.refused:
            return False
        if hold.wait_s > 0:
            await self._asleep(hold.wait_s)
        token, ok = _waited.set((self, self.key(name))), False
        try:
            result = verify()
            ok = bool(await result if inspect.isawaitable(result) else result)
        finally:
            _waited.reset(token)
            self.end(hold, ok)
        return ok


def throttled_auth(throttle: GuessThrottle, auth: Callable[[str, str], Awaitable[bool]]) -> Callable:
    """An async Gradio `auth=` that waits each try in the event loop (`throttle.acheck`), then
    awaits `auth(username, password)`, whose own `throttle.check` (the same throttle, e.g. on a
    worker thread) then checks at once. For an `auth` that throttles synchronously inside."""

    async def held(username: str, password: str) -> bool:
        return await throttle.acheck(username, lambda: auth(username, password))

    return held


class AdminGate:
    """The admin password check. Without a password every request passes (local use)."""

    def __init__(self, password: str | None = None, throttle: GuessThrottle | None = None):
        self._password = password or None
        self.throttle = throttle or GuessThrottle()
        if self._password and len(self._password) < MIN_ADMIN_PASSWORD_CHARS:
            log.warning("the admin password is shorter than %d characters; use a long random one "
                        "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)",
                        MIN_ADMIN_PASSWORD_CHARS)

    @classmethod
    def from_sources(cls, flag: str | None = None, environ: Mapping[str, str] | None = None) -> AdminGate:
        """`--admin-password` if given, else the RUMIK_ADMIN_PASSWORD environment variable, else none."""
        env = os.environ if environ is None else environ
        return cls(flag or env.get(ADMIN_PASSWORD_ENV) or None)

    @property
    def enabled(self) -> bool:
        return self._password is not None

    def fingerprint(self) -> str:
        """A digest of the password, for session tables (a changed password ends old sessions)."""
        return hashlib.sha256(b"rumik-admin\0" + (self._password or "").encode("utf-8")).hexdigest()

    def allows(self, supplied: str | None) -> bool:
        return not self.enabled or same_secret(supplied, self._password)

    def require(self, supplied: str | None, action: str, address: str | None = None) -> None:
        """Raise AccessDenied (a readable UI error) unless the admin password matches.
        address: the client's (a Gradio handler's `request.client.host`), for the throttle."""
        if not self.enabled:
            return
        if not supplied:
            log.warning("%s refused: no admin password", action)
            raise AccessDenied(f"{action} needs the admin password: enter it under 'Results and export' "
                               "(API: admin_password=...).")
        checked = []
        if self.throttle.check(ADMIN_FORM_KEY, lambda: checked.append(1) or self.allows(supplied), address):
            return
        if not checked:  # its wait is longer than a worker thread may hold: refused unchecked
            wait = self.throttle.wait_s(ADMIN_FORM_KEY, address)
            raise AccessDenied(f"{action}: too many wrong admin passwords; try again in {max(wait, 1):.0f} s.")
        log.warning("%s refused: wrong admin password", action)
        raise AccessDenied(f"{action}: wrong admin password.")

    def __repr__(self) -> str:  # never the password itself
        return f"AdminGate(enabled={self.enabled})"


def parse_login(entry: str, where: str) -> tuple[str, str]:
    """'USER:PASS' -> (user, pass); the password may contain ':' (split at the first one)."""
    user, sep, password = entry.partition(":")
    user = user.strip()
    if not sep or not user or not password:
        # The entry itself is not echoed: it may be a password typed without its user.
        raise LoginError(f"{where}: expected USER:PASS (a user name, a colon, a password), "
                         "e.g. --auth asha:long-secret.")
    return user, password


def read_logins(pairs: Iterable[str] = (), auth_file: str | os.PathLike | None = None,
                environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Logins from --auth USER:PASS flags, an --auth-file (one USER:PASS a line, # comments)
    and $RUMIK_APP_AUTH (same format as the file). Empty list = no login required."""
    env = os.environ if environ is None else environ
    logins = [parse_login(p, f"--auth entry {k}") for k, p in enumerate(pairs, 1)]
    sources: list[tuple[str, str]] = []
    if auth_file:
        path = Path(auth_file)
        try:
            sources.append((f"--auth-file {path}", path.read_text(encoding="utf-8")))
        except OSError as exc:
            raise LoginError(f"--auth-file {path}: cannot read it ({exc.strerror or exc}).") from None
    if env.get(AUTH_ENV):
        sources.append((f"${AUTH_ENV}", env[AUTH_ENV]))
    for name, text in sources:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                logins.append(parse_login(line.rstrip("\r\n"), f"{name} line {n}"))
    users = [u for u, _ in logins]
    if len(set(users)) != len(users):
        dupes = sorted({u for u in users if users.count(u) > 1})
        raise LoginError(f"login {', '.join(dupes)} is given more than once; keep one password per user.")
    return logins


class LoginCheck:
    """Gradio `auth=` callable: checks every entry in constant time, so timing tells nothing
    about which user names exist; repeated wrong passwords are slowed by a `GuessThrottle`."""

    def __init__(self, logins: list[tuple[str, str]], throttle: GuessThrottle | None = None):
        if not logins:
            raise ValueError("LoginCheck needs at least one USER:PASS login")
        self._logins = list(logins)
        self.throttle = throttle or GuessThrottle()

    def __call__(self, username: str, password: str) -> bool:
        """The check on this thread (a wait holds it; see `GuessThrottle.check`)."""
        return self.throttle.check(username, lambda: self._matches(username, password))

    async def acheck(self, username: str, password: str) -> bool:
        """The check for Gradio (`auth=login.acheck`): a try's wait is awaited, holding no thread
        (Gradio awaits an async auth function in its login route; a plain one runs on the event loop)."""
        return await self.throttle.acheck(username, lambda: self._matches(username, password))

    def _matches(self, username: str, password: str) -> bool:
        ok = False
        for user, secret in self._logins:
            ok |= same_secret(username, user) & same_secret(password, secret)
        return ok

    def __repr__(self) -> str:
        return f"LoginCheck({len(self._logins)} logins)"
