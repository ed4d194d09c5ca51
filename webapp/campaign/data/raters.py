"""Rater logins for annotation campaigns: a raters file of scrypt hashes, and the check Gradio's
login page calls.

Library module (the command line is `python -m webapp.campaign add-rater NAME`)::

    raters = RatersFile(raters_path(layout))
    password = raters.add("asha")              # printed once by the CLI; only its hash is stored
    raters.verify("asha", password)            # True
    raters.remove("asha")                      # `remove-rater asha`: her sessions end at their next request
    demo.launch(auth=CampaignLogin(raters, AdminGate.from_sources()).acheck)   # raters + the admin login

The file (`<data dir>/campaigns/raters.json`, never served, mode 0600) holds, per rater, a
`scrypt$N$r$p$salt$hash` string (hashlib.scrypt, 16-byte random salt per rater), never a
password. Every change is a read-modify-write under an exclusive lock (`raters.json.lock`,
fcntl) and lands with an atomic rename, so two `add-rater` runs never lose each other's
entry and a crash leaves the old file or the new one. The server reads the file at every
sign-in, so raters added while it runs can sign in at once.

Roles: the user name `admin` is reserved. It signs in with the admin password (`--admin-password`
or $RUMIK_ADMIN_PASSWORD, `webapp.access.AdminGate`) and sees the admin view only; without an
admin password there is no admin login (results stay available to whoever holds the data dir,
through `python -m webapp.campaign results`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rumik_app.errors import RumikError
from webapp.access import AdminGate, GuessThrottle
from webapp.campaign.data.definition import write_json_atomic
from webapp.ratings import now_iso

ADMIN_USER = "admin"
RATER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
PASSWORD_BYTES = 12  # 16 URL-safe characters, 96 bits
SALT_BYTES = 16
# scrypt cost: 16 MiB and ~50 ms per check on one core; a guess over HTTP costs the same.
SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_DKLEN = 2**14, 8, 1, 32
FILE_MODE = 0o600
SESSION_MAX_AGE_S = 12 * 3600  # a sign-in lasts a working day; then sign in again


class RaterError(RumikError, ValueError):
    """A bad rater name or an unusable raters file; the message names the fix."""


def check_rater_name(name: str) -> str:
    name = (name or "").strip()
    if not RATER_NAME.match(name):
        raise RaterError(f"Rater name {name!r}: use 1-40 letters, digits, '.', '_' or '-', starting with a letter or "
                         "digit.")
    if name.casefold() == ADMIN_USER:
        raise RaterError(f"{ADMIN_USER!r} is the admin's login (the admin password); choose another rater name.")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, salt: bytes | None = None, n: int = SCRYPT_N, r: int = SCRYPT_R,
                  p: int = SCRYPT_P) -> str:
    """`scrypt$N$r$p$<salt b64>$<hash b64>` of a password (UTF-8)."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=SCRYPT_DKLEN)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def check_password(password: str, stored: str) -> bool:
    """True when `password` matches a `hash_password` string (constant-time comparison)."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode("utf-8"), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


@functools.cache
def _dummy_hash() -> str:
    """Checked against for unknown names, so a wrong name costs the same time as a wrong password."""
    return hash_password(secrets.token_urlsafe(PASSWORD_BYTES))


class RatersFile:
    """The raters file (created by the first `add`)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read(self) -> dict:
        if not self.path.is_file():
            return {"version": 1, "raters": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data.get("raters"), dict):
                raise ValueError("no 'raters' object")
            return data
        except (ValueError, OSError) as exc:
            raise RaterError(f"The raters file {self.path} is unreadable ({exc}); restore it from a backup or move it "
                             "away and add the raters again.") from None

    def names(self) -> list[str]:
        return sorted(self._read()["raters"])

    def add(self, name: str, reset: bool = False) -> str:
        """Create a login (or, with `reset`, a new password for an existing one); returns the
        password, which is not stored anywhere."""
        name = check_rater_name(name)
        password = secrets.token_urlsafe(PASSWORD_BYTES)
        with self._locked():
            data = self._read()
            entry = data["raters"].get(name)
            if entry is not None and not reset:
                raise RaterError(f"Rater {name!r} exists already. Use --reset-password to issue a new password.")
            data["raters"][name] = {"hash": hash_password(password), "created_at": (entry or {}).get("created_at",
                                                                                                    now_iso()),
                                    "password_set_at": now_iso()}
            write_json_atomic(self.path, data)
            os.chmod(self.path, FILE_MODE)
        return password

    def has(self, name: str) -> bool:
        """The login exists (read from the file each time, so a removal takes effect at once)."""
        try:
            return (name or "") in self._read()["raters"]
        except RaterError:
            return False

    def remove(self, name: str) -> bool:
        """Delete a login; False if there was none. Sessions signed in before are refused from
        their next request on (the campaign server checks `has` on every call)."""
        with self._locked():
            data = self._read()
            if data["raters"].pop(name, None) is None:
                return False
            write_json_atomic(self.path, data)
            os.chmod(self.path, FILE_MODE)
        return True

    def verify(self, name: str, password: str) -> bool:
        """Constant work whether or not the name exists."""
        try:
            entry = self._read()["raters"].get(name or "")
        except RaterError:
            entry = None
        stored = entry.get("hash") if isinstance(entry, dict) else None
        ok = check_password(password or "", stored or _dummy_hash())
        return ok and stored is not None

    def fingerprint(self, name: str) -> str | None:
        """What a session of `name` was signed in against (its password hash; None: no such
        login). A reset password, a removal or a removal and a new login all change it."""
        try:
            entry = self._read()["raters"].get(name or "")
        except RaterError:
            return None
        return entry.get("hash") if isinstance(entry, dict) else None

    def __repr__(self) -> str:
        return f"RatersFile({str(self.path)!r})"


class ExpiringSessions(dict):
    """Gradio's session table (token -> signed-in user, `App.tokens`) with an end: a session
    is refused once it is older than `max_age_s`, or when what its user signed in with has
    changed since (a reset password, a removed login, a removed and re-added one; the admin's
    password). `fingerprint(user)` says what a user signs in with now."""

    def __init__(self, fingerprint: Callable[[str], str | None], max_age_s: float = SESSION_MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.fingerprint, self.max_age_s, self._clock = fingerprint, max_age_s, clock
        self._issued: dict[str, tuple[float, str | None]] = {}

    def __setitem__(self, token: str, user: str) -> None:
        super().__setitem__(token, user)
        self._issued[token] = (self._clock(), self.fingerprint(user))

    def _alive(self, token) -> bool:
        if not super().__contains__(token):
            return False
        issued, signed_with = self._issued.get(token, (0.0, None))
        user = super().__getitem__(token)
        if self._clock() - issued > self.max_age_s or signed_with is None or self.fingerprint(user) != signed_with:
            super().pop(token, None)
            self._issued.pop(token, None)
            return False
        return True

    def get(self, token, default=None):
        return super().get(token) if self._alive(token) else default

    def __contains__(self, token) -> bool:
        return self._alive(token)

    def __getitem__(self, token):
        if not self._alive(token):
            raise KeyError(token)
        return super().__getitem__(token)

    def __delitem__(self, token) -> None:
        super().__delitem__(token)
        self._issued.pop(token, None)


class CampaignLogin:
    """Gradio `auth=` callable: raters from the raters file, plus `admin` with the admin password.
    Repeated wrong passwords for one name are slowed by a `GuessThrottle` (which also spares the
    server scrypt work while a name is paused)."""

    def __init__(self, raters: RatersFile, admin: AdminGate, throttle: GuessThrottle | None = None):
        self.raters, self.admin = raters, admin
        self.throttle = throttle or GuessThrottle()

    def __call__(self, username: str, password: str) -> bool:
        return self.throttle.check(username, lambda: self._matches(username, password))

    async def acheck(self, username: str, password: str) -> bool:
        """The same check on a worker thread: pass this to Gradio (`auth=login.acheck`), whose
        login route is async, so a sign-in's ~50 ms of scrypt never stalls the event loop."""
        return await asyncio.to_thread(self, username, password)

    def fingerprint(self, username: str) -> str | None:
        """For `ExpiringSessions`: a rater's password hash; the admin's password, hashed."""
        if (username or "").casefold() == ADMIN_USER:
            return self.admin.fingerprint() if self.admin.enabled else None
        return self.raters.fingerprint(username)

    def _matches(self, username: str, password: str) -> bool:
        if (username or "").casefold() == ADMIN_USER:
            # AdminGate.allows is True for anyone when no password is set: here that means no admin login.
            ok = self.admin.enabled and self.admin.allows(password)
            self.raters.verify("", password)  # same cost as a rater's check
            return ok
        return self.raters.verify(username, password)

    def __repr__(self) -> str:
        return f"CampaignLogin({self.raters!r}, admin={self.admin.enabled})"


def is_admin(username: str | None) -> bool:
    """The signed-in user is the admin (Gradio's `request.username`; only CampaignLogin lets it in)."""
    return (username or "").casefold() == ADMIN_USER
