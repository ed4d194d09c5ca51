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
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.common import UserError

log = logging.getLogger(__name__)

ADMIN_PASSWORD_ENV = "RUMIK_ADMIN_PASSWORD"
AUTH_ENV = "RUMIK_APP_AUTH"  # lines of USER:PASS, like --auth-file (a Space secret)
MIN_ADMIN_PASSWORD_CHARS = 12  # shorter ones work, with a warning: the password form can be tried over HTTP


class AccessDenied(UserError):
    """The visitor lacks the password an action needs; the message says where to enter it."""


class LoginError(RumikError, ValueError):
    """A malformed --auth / --auth-file / $RUMIK_APP_AUTH entry; the message names the fix."""


def same_secret(supplied: str | None, expected: str) -> bool:
    """Constant-time comparison of two secrets (UTF-8 bytes, so any script compares correctly)."""
    return hmac.compare_digest((supplied or "").encode("utf-8"), expected.encode("utf-8"))


class AdminGate:
    """The admin password check. Without a password every request passes (local use)."""

    def __init__(self, password: str | None = None):
        self._password = password or None
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
        if self.allows(supplied):
            return
        log.warning("%s refused: %s admin password", action, "wrong" if supplied else "no")
        if not supplied:
            raise AccessDenied(f"{action} needs the admin password: enter it under 'Results and export' "
                               "(API: admin_password=...).")
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
    about which user names exist."""

    def __init__(self, logins: list[tuple[str, str]]):
        if not logins:
            raise ValueError("LoginCheck needs at least one USER:PASS login")
        self._logins = list(logins)

    def __call__(self, username: str, password: str) -> bool:
        ok = False
        for user, secret in self._logins:
            ok |= same_secret(username, user) & same_secret(password, secret)
        return ok

    def __repr__(self) -> str:
        return f"LoginCheck({len(self._logins)} logins)"
