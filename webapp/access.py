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

Guessing is slowed by `GuessThrottle`: after 5 wrong passwords in a row for one user name (or
for the admin password form), further tries for it are refused without being checked for a
pause that doubles from 1 s up to 5 min; a right password resets the count. A visitor who
guesses can therefore hold a login back for at most 5 minutes at a time, never read it.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.common import UserError

log = logging.getLogger(__name__)

ADMIN_PASSWORD_ENV = "RUMIK_ADMIN_PASSWORD"
AUTH_ENV = "RUMIK_APP_AUTH"  # lines of USER:PASS, like --auth-file (a Space secret)
MIN_ADMIN_PASSWORD_CHARS = 12  # shorter ones work, with a warning: the password form can be tried over HTTP
FREE_FAILURES = 5          # wrong passwords in a row before a key is slowed down (typos are free)
FIRST_BACKOFF_S = 1.0      # the first pause; it doubles with every further failure ...
MAX_BACKOFF_S = 300.0      # ... up to this, so a guesser can hold a login back 5 min at most
MAX_TRACKED_KEYS = 10_000  # bounds memory when guessers invent user names
ADMIN_FORM_KEY = "\0admin-form"  # the admin password form's key (no user name can contain NUL)


class AccessDenied(UserError):
    """The visitor lacks the password an action needs; the message says where to enter it."""


class LoginError(RumikError, ValueError):
    """A malformed --auth / --auth-file / $RUMIK_APP_AUTH entry; the message names the fix."""


def same_secret(supplied: str | None, expected: str) -> bool:
    """Constant-time comparison of two secrets (UTF-8 bytes, so any script compares correctly)."""
    return hmac.compare_digest((supplied or "").encode("utf-8"), expected.encode("utf-8"))


class GuessThrottle:
    """Per-key (user name) brake on password guessing; thread-safe (Gradio checks logins on
    worker threads). `wait_s(key)` > 0 means: refuse without checking the password."""

    def __init__(self, free_failures: int = FREE_FAILURES, first_backoff_s: float = FIRST_BACKOFF_S,
                 max_backoff_s: float = MAX_BACKOFF_S, clock: Callable[[], float] = time.monotonic):
        self.free_failures, self.first_backoff_s, self.max_backoff_s = free_failures, first_backoff_s, max_backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (failures in a row, time of the last)

    @staticmethod
    def key(username: str | None) -> str:
        return (username or "").casefold()[:256]

    def _backoff_s(self, failures: int) -> float:
        extra = failures - self.free_failures
        return 0.0 if extra < 0 else min(self.max_backoff_s, self.first_backoff_s * 2.0 ** extra)

    def wait_s(self, key: str) -> float:
        """Seconds before `key` may be tried again (0: now)."""
        with self._lock:
            failures, last = self._failures.get(key, (0, 0.0))
        return max(0.0, last + self._backoff_s(failures) - self._clock()) if failures else 0.0

    def record(self, key: str, ok: bool) -> None:
        with self._lock:
            if ok:
                self._failures.pop(key, None)
                return
            failures, _ = self._failures.get(key, (0, 0.0))
            if len(self._failures) >= MAX_TRACKED_KEYS and key not in self._failures:
                self._forget_stale()
            self._failures[key] = (failures + 1, self._clock())
            if failures + 1 == self.free_failures:
                log.warning("%d wrong passwords in a row for one login: slowing further tries down", failures + 1)

    def _forget_stale(self) -> None:
        """Drop keys whose pause is over; if guessers still fill the table, drop the oldest half."""
        now = self._clock()
        self._failures = {k: (n, t) for k, (n, t) in self._failures.items() if t + self._backoff_s(n) > now}
        if len(self._failures) >= MAX_TRACKED_KEYS:
            newest = sorted(self._failures.items(), key=lambda item: item[1][1])[MAX_TRACKED_KEYS // 2:]
            self._failures = dict(newest)

    def check(self, key: str, verify: Callable[[], bool]) -> bool:
        """`verify()` unless `key` is paused (then False, unchecked); records the outcome."""
        if self.wait_s(key) > 0:
            return False
        ok = bool(verify())
        self.record(key, ok)
        return ok


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

    def allows(self, supplied: str | None) -> bool:
        return not self.enabled or same_secret(supplied, self._password)

    def require(self, supplied: str | None, action: str) -> None:
        """Raise AccessDenied (a readable UI error) unless the admin password matches."""
        if not self.enabled:
            return
        if not supplied:
            log.warning("%s refused: no admin password", action)
            raise AccessDenied(f"{action} needs the admin password: enter it under 'Results and export' "
                               "(API: admin_password=...).")
        wait = self.throttle.wait_s(ADMIN_FORM_KEY)
        if wait > 0:
            raise AccessDenied(f"{action}: too many wrong admin passwords; try again in {wait:.0f} s.")
        ok = self.allows(supplied)
        self.throttle.record(ADMIN_FORM_KEY, ok)
        if ok:
            return
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
        return self.throttle.check(GuessThrottle.key(username), lambda: self._matches(username, password))

    def _matches(self, username: str, password: str) -> bool:
        ok = False
        for user, secret in self._logins:
            ok |= same_secret(username, user) & same_secret(password, secret)
        return ok

    def __repr__(self) -> str:
        return f"LoginCheck({len(self._logins)} logins)"
