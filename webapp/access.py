"""Who may see what in `app.py`: the admin password that guards results and exports, and the
`--auth` logins that close the whole app.

Library module (no command line)::

    admin = AdminGate.from_sources(args.admin_password)   # --admin-password, else $RUMIK_ADMIN_PASSWORD
    admin.require(password_from_the_form, "Exporting the ratings")   # AccessDenied unless it matches
    logins = read_logins(["asha:s3cret"], "logins.txt")     # --auth USER:PASS ..., --auth-file FILE, $RUMIK_APP_AUTH
    demo.launch(auth=LoginCheck(logins))

No admin password configured (local use) means results and exports are open to everyone who
can reach the app, as before. Passwords are compared in constant time (`hmac.compare_digest`)
and never logged or echoed. The campaign logins of a later issue build on `AdminGate`.

Guessing is slowed by `GuessThrottle`, keyed on the login name *and* the client's address
(`webapp.guard.client_address()`): after 5 wrong passwords in a row for one name from one
address, further tries are refused without being checked for a pause that doubles from 1 s up
to 5 min; one address also gets at most 30 failures over all names before its own pause
(a flood of invented names). A right password resets the name's count. Each try is counted
before its password is checked (under one lock), so parallel tries cannot all slip into one
window; entries that are paused or failed recently are never forgotten to make room. So a
guesser slows only itself: the real user, from another address, is never locked out.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.common import UserError
from webapp.guard import client_address

log = logging.getLogger(__name__)

ADMIN_PASSWORD_ENV = "RUMIK_ADMIN_PASSWORD"
AUTH_ENV = "RUMIK_APP_AUTH"  # lines of USER:PASS, like --auth-file (a Space secret)
MIN_ADMIN_PASSWORD_CHARS = 12  # shorter ones work, with a warning: the password form can be tried over HTTP
FREE_FAILURES = 5          # wrong passwords in a row for one name and address before it slows (typos are free)
ADDRESS_FREE_FAILURES = 30  # wrong passwords from one address, over all names, before the address slows
FIRST_BACKOFF_S = 1.0      # the first pause; it doubles with every further failure ...
MAX_BACKOFF_S = 300.0      # ... up to this, so a guesser can hold a login back 5 min at most
RECENT_S = 3 * MAX_BACKOFF_S  # a failure this recent is never forgotten to make room
MAX_TRACKED_KEYS = 10_000  # bounds memory when guessers invent user names
ADMIN_FORM_KEY = "\0admin-form"  # the admin password form's name (no user name can contain NUL)
MAX_NAME_CHARS = 256


class AccessDenied(UserError):
    """The visitor lacks the password an action needs; the message says where to enter it."""


class LoginError(RumikError, ValueError):
    """A malformed --auth / --auth-file / $RUMIK_APP_AUTH entry; the message names the fix."""


def same_secret(supplied: str | None, expected: str) -> bool:
    """Constant-time comparison of two secrets (UTF-8 bytes, so any script compares correctly)."""
    return hmac.compare_digest((supplied or "").encode("utf-8"), expected.encode("utf-8"))


class GuessThrottle:
    """Brake on password guessing per (name, client address) and per address; thread-safe
    (Gradio checks logins on worker threads). See the module docstring."""

    def __init__(self, free_failures: int = FREE_FAILURES, first_backoff_s: float = FIRST_BACKOFF_S,
                 max_backoff_s: float = MAX_BACKOFF_S, clock: Callable[[], float] = time.monotonic,
                 address_free_failures: int = ADDRESS_FREE_FAILURES, max_keys: int = MAX_TRACKED_KEYS):
        self.free_failures, self.first_backoff_s, self.max_backoff_s = free_failures, first_backoff_s, max_backoff_s
        self.address_free_failures, self.max_keys = address_free_failures, max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (failures in a row, time of the last)

    @staticmethod
    def key(username: str | None) -> str:
        return (username or "").casefold()[:MAX_NAME_CHARS]

    def _keys(self, name: str, address: str | None) -> list[tuple[str, int]]:
        """(key, free failures) of a try: the name at this address, and the address."""
        address = client_address() if address is None else address
        return [(f"{self.key(name)}\0{address}", self.free_failures), (f"\0address\0{address}", self.address_free_failures)]

    def _backoff_s(self, failures: int, free: int) -> float:
        extra = failures - free
        return 0.0 if extra < 0 else min(self.max_backoff_s, self.first_backoff_s * 2.0 ** extra)

    def _wait(self, key: str, free: int, now: float) -> float:
        failures, last = self._failures.get(key, (0, 0.0))
        return max(0.0, last + self._backoff_s(failures, free) - now) if failures else 0.0

    def wait_s(self, name: str, address: str | None = None) -> float:
        """Seconds before `name` may be tried again from `address` (default: this request's; 0: now)."""
        with self._lock:
            now = self._clock()
            return max(self._wait(k, free, now) for k, free in self._keys(name, address))

    def check(self, name: str, verify: Callable[[], bool], address: str | None = None) -> bool:
        """`verify()` unless paused (then False, unchecked). The try is counted as a failure
        before `verify` runs and uncounted if it succeeds, all under the lock: parallel tries
        see each other."""
        keys = self._keys(name, address)
        with self._lock:
            now = self._clock()
            if any(self._wait(k, free, now) > 0 for k, free in keys) or not self._make_room(keys, now):
                return False
            for k, free in keys:
                failures, _ = self._failures.get(k, (0, 0.0))
                self._failures[k] = (failures + 1, now)
                if failures + 1 == free:
                    log.warning("%d wrong passwords in a row for one login: slowing further tries down", failures + 1)
        ok = bool(verify())
        if ok:
            with self._lock:
                self._failures.pop(keys[0][0], None)
                failures, last = self._failures.get(keys[1][0], (1, now))
                if failures <= 1:
                    self._failures.pop(keys[1][0], None)
                else:
                    self._failures[keys[1][0]] = (failures - 1, last)
        return ok

    def _make_room(self, keys, now: float) -> bool:
        """Room for the try's keys (under the lock): forget entries neither paused nor recent;
        False (refuse the try) when every tracked entry is one of those."""
        new = sum(k not in self._failures for k, _ in keys)
        if len(self._failures) + new <= self.max_keys:
            return True
        self._failures = {k: (n, t) for k, (n, t) in self._failures.items()
                          if now - t < RECENT_S or t + self._backoff_s(n, self.free_failures) > now}
        if len(self._failures) + new <= self.max_keys:
            return True
        log.warning("password guessing from many addresses: %d sign-in entries tracked, refusing new ones",
                    len(self._failures))
        return False


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
        if not checked:  # paused: refused unchecked
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
        raise LoginError(f"{where}: expected USER:PASS (a user name, a colon, a password), e.g. --auth asha:long-secret.")
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
        return self.throttle.check(username, lambda: self._matches(username, password))

    def _matches(self, username: str, password: str) -> bool:
        ok = False
        for user, secret in self._logins:
            ok |= same_secret(username, user) & same_secret(password, secret)
        return ok

    def __repr__(self) -> str:
        return f"LoginCheck({len(self._logins)} logins)"
