"""Crowdsourced campaigns (Prolific, MTurk): signed participant links, the participants table,
completion codes. No login: a signed link lets a participant in, and each id gets one queue.

Library module (the server and the CLI call it)::

    links = CrowdLinks(load_crowd_secret(crowd_secret_path(layout)), "pilot")
    links.participant_link("https://host/crowd/pilot", "A1B2C3D4E5F6G7")  # one id, signed, valid 30 days
    links.study_link("https://host/crowd/pilot")       # the one URL pasted into a Prolific study (30 days)
    code = completion_code(campaign.folder, configured=args.completion_code)   # "K7M2Q9XH"
    ParticipantStore(layout.database).start("pilot", "A1B2C3D4E5F6G7", max_participants=24)   # session 1
    prolific_completion_url(code)                      # where the last page sends a Prolific participant

`webapp.campaign.data.crowd_gate.CrowdGate` puts these together for the server.

Trust model. The server secret (`campaigns/crowd_secret`: 32 random bytes as hex, mode 0600,
created once; `DataLayout` keeps campaigns/ private, so it is never served) keys every HMAC.
Each campaign gets its own key derived from it, so nothing signed for one campaign (link, study
token, session token, rater name) is valid in another. Signatures are HMAC-SHA256 truncated to
128 bits, compared in constant time; inputs are length- and character-checked before any work.

- A participant link (`?PROLIFIC_PID=<id>&expires=<unix s>&sig=<mac>`) admits exactly that id
  until it expires (the expiry is signed with the id).
- A study link (`?PROLIFIC_PID={{%PROLIFIC_PID%}}&...&expires=<unix s>&study=<mac>`) is filled
  in by Prolific, so it cannot be signed per id: it admits ANY id in Prolific's format (24 hex
  digits) until it expires. Whoever holds a study link can start as any id they make up, so what
  such a start can take is bounded (`crowd_gate`): an address starts a few new ids an hour, and
  a place is given back when its holder fails the hearing check or has not finished within the
  time limit: a made-up id holds a place for that long at most, and a real participant then
  gets it.

Bounds (`ParticipantStore.start`, one `BEGIN IMMEDIATE` transaction, so concurrent starts are
serialised): a new id is refused once the campaign has `max_participants` ids (default: its
rater slots, one queue each); an id may start `max_sessions` times (default 2: the first visit
and one reload or reopened tab); a finished id never starts again. A new session supersedes the
older ones: their tokens are refused from then on (`CrowdGate.resume`). A released place
(`release`: kept in `campaign_participant_releases`) counts no more, and its id never starts again.

Completion code: Prolific gives a study one code that the researcher also types into Prolific,
so a campaign has one code, configured (`--completion-code`, 4-32 of A-Z 0-9) or generated once
and kept in `campaigns/<name>/crowd.json`. Rater names are `crowd-<12 hex>` (an HMAC of the id),
so exports do not show participant ids; `ParticipantStore.participants` holds the mapping.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import time
from pathlib import Path

from rumik_app.errors import RumikError
from rumik_app.files import fsync_dir
from rumik_app.sqlite import SQLiteStore
from webapp.campaign.data.conditions import check_name
from webapp.campaign.data.definition import write_json_atomic
from webapp.ratings import now_iso
from webapp.storage import DataLayout

SECRET_FILE = "crowd_secret"  # under DataLayout.campaigns
SECRET_BYTES = 32
SECRET_MODE = 0o600
CODE_FILE = "crowd.json"  # under the campaign folder
KEY_CONTEXT = b"rumik-crowd-v1"
SIG_HEX = 32  # 128-bit signatures
RATER_HEX = 12  # crowd-<12 hex>: 48 bits, no collision in any realistic campaign
RATER_PREFIX = "crowd-"
MAX_ID_CHARS = 64
MAX_SESSION_DIGITS = 6
MAX_EXPIRY_DIGITS = 12  # unix seconds
MAX_TOKEN_CHARS = MAX_ID_CHARS + MAX_SESSION_DIGITS + SIG_HEX + 2
PARTICIPANT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # Prolific (24 hex), MTurk worker ids (A + 12-20 alnum), ...
PROLIFIC_ID = re.compile(r"[0-9a-fA-F]{24}")
HEX_SIG = re.compile(r"[0-9a-f]{%d}" % SIG_HEX)
EXPIRY = re.compile(r"[1-9][0-9]{0,%d}" % (MAX_EXPIRY_DIGITS - 1))
COMPLETION_CODE = re.compile(r"[A-Z0-9]{4,32}")
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # A-Z 0-9 without look-alikes (I/1, O/0)
CODE_LENGTH = 8
MAX_SESSIONS_PER_ID = 2  # the first visit plus one reload or reopened tab
LINK_DAYS = 30  # how long a link made without an explicit expiry admits its participants

# URL parameters: Prolific's names (https://docs.prolific.com, "the study object"), ours for signatures.
ID_PARAM, STUDY_ID_PARAM, SESSION_ID_PARAM = "PROLIFIC_PID", "STUDY_ID", "SESSION_ID"
SIG_PARAM, STUDY_PARAM, EXPIRES_PARAM = "sig", "study", "expires"
PROLIFIC_PLACEHOLDERS = {ID_PARAM: "{{%PROLIFIC_PID%}}", STUDY_ID_PARAM: "{{%STUDY_ID%}}",
                         SESSION_ID_PARAM: "{{%SESSION_ID%}}"}
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete"

BAD_LINK = "This link is not valid for this test; open the link from your study page again."
FULL = "This test is full; thank you for your interest. Return the study on your study page."
USED = "This link was used already; it cannot start the test again. Contact the researcher through your study page."
FINISHED = "You have finished this test already; your completion code is on your study page's last step."
SUPERSEDED = "This test was opened again in another tab or window; continue there and close this one."
EXPIRED = "This link has expired; ask the researcher for a new one through your study page."
TIMED_OUT = ("The time for this test ran out (or the hearing check did not pass), so your place went to someone "
             "else; return the study on your study page.")

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaign_participants (
    campaign TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    rater TEXT,
    sessions INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    last_started_at TEXT NOT NULL,
    completed_at TEXT,
    completion_code TEXT,
    study_id TEXT,
    session_id TEXT,
    PRIMARY KEY (campaign, participant_id)
);
CREATE TABLE IF NOT EXISTS campaign_participant_releases (
    campaign TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    released_at TEXT NOT NULL,
    reason TEXT NOT NULL CHECK (reason IN ('timed out', 'hearing check')),
    PRIMARY KEY (campaign, participant_id)
);
"""


RELEASED = "SELECT 1 FROM campaign_participant_releases WHERE campaign = ? AND participant_id = ?"
PARTICIPANT_ROWS = ("SELECT p.*, r.released_at, r.reason AS release_reason FROM campaign_participants AS p "
                    "LEFT JOIN campaign_participant_releases AS r ON r.campaign = p.campaign AND "
                    "r.participant_id = p.participant_id WHERE p.campaign = ?")


class CrowdError(RumikError, PermissionError):
    """A crowd participant who may not go on; the message (shown to them) names what to do.

    reason: "link" (forged, foreign or malformed link or token), "expired" (a link past its
    expiry), "full", "used", "finished", "superseded" (an older tab), "released" (the place was
    given back), "busy" (too many study starts from one address), "unfinished" (asked for the code
    too early) or "config"."""

    def __init__(self, message: str, reason: str = "link"):
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------- the server secret
def crowd_secret_path(layout: DataLayout) -> Path:
    return layout.campaigns / SECRET_FILE


def create_once(path: Path, text: str, mode: int = SECRET_MODE) -> bool:
    """Create `path` holding `text` unless it exists; False if it existed (its content is kept).

    Race-safe and atomic: the content is written and fsync'ed to a private temp file, then
    hard-linked to `path` (`os.link` fails if the name exists), so concurrent creators agree on
    one file and no reader ever sees a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        try:
            os.link(tmp, path)
            created = True
        except FileExistsError:
            created = False
    finally:
        os.unlink(tmp)
    fsync_dir(path.parent)
    return created


def load_crowd_secret(path: str | os.PathLike) -> bytes:
    """The server's crowd secret (32 bytes), created on first use; group/other access is removed."""
    path = Path(path)
    if not path.exists():
        create_once(path, secrets.token_hex(SECRET_BYTES) + "\n")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, SECRET_MODE)
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if not re.fullmatch(r"[0-9a-f]{%d}" % (2 * SECRET_BYTES), text):
        raise CrowdError(f"The crowd secret {path} is damaged; delete it and restart the server (links given out "
                         "before stop working; make new ones).", reason="config")
    return bytes.fromhex(text)


# ---------------------------------------------------------------------------- links and tokens
def check_participant_id(participant_id: object) -> str:
    """The id if it is 1-64 of A-Z a-z 0-9 _ -, else CrowdError (before any other work)."""
    if not isinstance(participant_id, str) or len(participant_id) > MAX_ID_CHARS \
            or not PARTICIPANT_ID.fullmatch(participant_id):
        raise CrowdError(BAD_LINK)
    return participant_id


def optional_id(value: object) -> str | None:
    """A Prolific STUDY_ID / SESSION_ID to record, or None when absent or not id-shaped."""
    return value if isinstance(value, str) and PARTICIPANT_ID.fullmatch(value) else None


def add_query(base_url: str, params: list[tuple[str, str]]) -> str:
    """`base_url` with `k=v` pairs appended verbatim (values must be URL-safe already; Prolific's
    `{{%...%}}` placeholders must stay unencoded), before any `#fragment`."""
    base, hash_, fragment = base_url.partition("#")
    sep = "&" if "?" in base else "?"
    if base.endswith(("?", "&")):
        sep = ""
    return base + sep + "&".join(f"{k}={v}" for k, v in params) + hash_ + fragment


def expiry(expires_at: int | None) -> str:
    """A link's expiry as signed and sent: unix seconds, default LINK_DAYS from now."""
    value = int(time.time()) + LINK_DAYS * 86400 if expires_at is None else int(expires_at)
    if not EXPIRY.fullmatch(str(value)):
        raise ValueError(f"expiry {expires_at!r} is not a time in unix seconds")
    return str(value)


class CrowdLinks:
    """Signing and checking for one campaign (a key derived from the server secret and its name)."""

    def __init__(self, secret: bytes, campaign: str):
        if len(secret) < SECRET_BYTES // 2:
            raise CrowdError("The crowd secret is too short; use load_crowd_secret().", reason="config")
        self.campaign = check_name(campaign)
        self._key = hmac.new(secret, KEY_CONTEXT + b"\x00" + campaign.encode("ascii"), hashlib.sha256).digest()

    @classmethod
    def for_layout(cls, layout: DataLayout, campaign: str) -> CrowdLinks:
        return cls(load_crowd_secret(crowd_secret_path(layout)), campaign)

    def _mac(self, purpose: str, *parts: str, n_hex: int = SIG_HEX) -> str:
        message = "\x00".join((purpose, *parts)).encode("ascii")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:n_hex]

    @staticmethod
    def _same(given: object, expected: str) -> bool:
        return isinstance(given, str) and bool(HEX_SIG.fullmatch(given)) and hmac.compare_digest(given, expected)

    # ------------------------------------------------------------------ links
    def participant_link(self, base_url: str, participant_id: str, expires_at: int | None = None) -> str:
        """`BASE?PROLIFIC_PID=<id>&expires=<unix s>&sig=<mac>`: admits exactly this id (Prolific,
        MTurk or own ids) until `expires_at` (default: LINK_DAYS from now)."""
        pid, expires = check_participant_id(participant_id), expiry(expires_at)
        return add_query(base_url, [(ID_PARAM, pid), (EXPIRES_PARAM, expires),
                                    (SIG_PARAM, self._mac("participant", pid, expires))])

    def study_link(self, base_url: str, expires_at: int | None = None) -> str:
        """The one study URL for Prolific, which fills in the id, study and session placeholders.

        Until `expires_at` (default: LINK_DAYS from now) it admits ANY id in Prolific's format (24
        hex digits): whoever holds this link can start as an id of their choice, bounded per
        address and in time (module docstring). Give it to Prolific only; use `participant_link`
        elsewhere."""
        expires = expiry(expires_at)
        params = [(k, v) for k, v in PROLIFIC_PLACEHOLDERS.items()]
        return add_query(base_url, [*params, (EXPIRES_PARAM, expires), (STUDY_PARAM, self._mac("study", expires))])

    def verify(self, participant_id: object, sig: object = None, study: object = None, expires: object = None,
               now: float | None = None) -> str:
        """The checked participant id, or CrowdError(BAD_LINK). With `sig`: it must sign this id
        and `expires` in this campaign. Else with `study`: the study token must sign `expires` in
        this campaign and the id must be Prolific-shaped. Neither: refused. A genuine link past
        its expiry (unix seconds; `now`: time.time()) is CrowdError(EXPIRED, reason "expired")."""
        pid = check_participant_id(participant_id)
        if not isinstance(expires, str) or not EXPIRY.fullmatch(expires):
            raise CrowdError(BAD_LINK)
        if sig is not None:
            ok = self._same(sig, self._mac("participant", pid, expires))
        elif study is not None:
            ok = bool(PROLIFIC_ID.fullmatch(pid)) and self._same(study, self._mac("study", expires))
        else:
            ok = False
        if not ok:
            raise CrowdError(BAD_LINK)
        if int(expires) <= (time.time() if now is None else now):
            raise CrowdError(EXPIRED, reason="expired")
        return pid

    # ------------------------------------------------------------------ after the start
    def session_token(self, participant_id: str, session_no: int) -> str:
        """`<id>.<session no>.<mac>`: what the page keeps after the start (signed with this campaign's key)."""
        pid = check_participant_id(participant_id)
        if not 1 <= session_no < 10**MAX_SESSION_DIGITS:
            raise ValueError(f"session_no {session_no} is out of range")
        return f"{pid}.{session_no}.{self._mac('session', pid, str(session_no))}"

    def verify_token(self, token: object) -> tuple[str, int]:
        """(participant id, session no) of a `session_token` of this campaign, else CrowdError(BAD_LINK)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            raise CrowdError(BAD_LINK)
        pid, number, mac = token.split(".")
        if not (PARTICIPANT_ID.fullmatch(pid) and number.isascii() and number.isdigit()
                and len(number) <= MAX_SESSION_DIGITS and not number.startswith("0")):
            raise CrowdError(BAD_LINK)
        if not self._same(mac, self._mac("session", pid, number)):
            raise CrowdError(BAD_LINK)
        return pid, int(number)

    def rater_name(self, participant_id: str) -> str:
        """`crowd-<12 hex>`: the participant's rater name in this campaign (does not show the id)."""
        return RATER_PREFIX + self._mac("rater", check_participant_id(participant_id), n_hex=RATER_HEX)


# ---------------------------------------------------------------------------- participants table
class ParticipantStore(SQLiteStore):
    """Crowd participants per campaign, in the ratings database (`rumik_app.sqlite.SQLiteStore`)."""

    SCHEMA = SCHEMA
    SCHEMA_KEY = "crowd_schema_version"
    SCHEMA_VERSION = 1

    def start(self, campaign: str, participant_id: str, max_participants: int,
              max_sessions: int = MAX_SESSIONS_PER_ID, *, rater: str | None = None, study_id: object = None,
              session_id: object = None, at: str | None = None) -> int:
        """Record a start of a checked participant id; returns its session number (1, 2, ...).

        One `BEGIN IMMEDIATE` transaction: a new id is refused (reason "full") once the campaign
        has `max_participants` ids holding a place (released ones do not); a known id is refused
        once released ("released"), finished ("finished") or after `max_sessions` starts ("used").
        study_id/session_id: Prolific's, kept when id-shaped. `at`: the time (ISO; default now)."""
        pid = check_participant_id(participant_id)
        study, session, now = optional_id(study_id), optional_id(session_id), at or now_iso()
        with self._transaction() as con:
            row = con.execute("SELECT sessions, completed_at FROM campaign_participants "
                              "WHERE campaign = ? AND participant_id = ?", (campaign, pid)).fetchone()
            if row is not None and con.execute(RELEASED, (campaign, pid)).fetchone():
                raise CrowdError(TIMED_OUT, reason="released")
            if row is None:
                (count,) = con.execute("SELECT COUNT(*) FROM campaign_participants AS p WHERE campaign = ? AND NOT "
                                       "EXISTS (SELECT 1 FROM campaign_participant_releases AS r WHERE "
                                       "r.campaign = p.campaign AND r.participant_id = p.participant_id)",
                                       (campaign,)).fetchone()
                if count >= max_participants:
                    raise CrowdError(FULL, reason="full")
                con.execute("INSERT INTO campaign_participants VALUES (?, ?, ?, 1, ?, ?, NULL, NULL, ?, ?)",
                            (campaign, pid, rater, now, now, study, session))
                return 1
            sessions, completed_at = int(row[0]), row[1]
            if completed_at is not None:
                raise CrowdError(FINISHED, reason="finished")
            if sessions >= max_sessions:
                raise CrowdError(USED, reason="used")
            con.execute("UPDATE campaign_participants SET sessions = ?, last_started_at = ?, "
                        "study_id = COALESCE(?, study_id), session_id = COALESCE(?, session_id) "
                        "WHERE campaign = ? AND participant_id = ?", (sessions + 1, now, study, session, campaign, pid))
            return sessions + 1

    def participant(self, campaign: str, participant_id: str) -> dict | None:
        """The participant's row (`participants`' keys), or None if the id never started."""
        with self._connect() as con:
            cur = con.execute(PARTICIPANT_ROWS + " AND p.participant_id = ?", (campaign, participant_id))
            row = cur.fetchone()
            return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))

    def unfinished_since(self, campaign: str, started_before: str) -> list[dict]:
        """Participants holding a place, unfinished, who first started before `started_before` (ISO)."""
        return [p for p in self.participants(campaign) if p["completed_at"] is None and p["released_at"] is None
                and p["started_at"] < started_before]

    def release(self, campaign: str, participant_id: str, reason: str) -> bool:
        """Give the participant's place back (reason "timed out" or "hearing check"); False if it
        was released before or the id finished meanwhile (checked in the same transaction)."""
        with self._transaction() as con:
            row = con.execute("SELECT completed_at FROM campaign_participants WHERE campaign = ? AND "
                              "participant_id = ?", (campaign, participant_id)).fetchone()
            if row is None or row[0] is not None:
                return False
            cur = con.execute("INSERT OR IGNORE INTO campaign_participant_releases VALUES (?, ?, ?, ?)",
                              (campaign, participant_id, now_iso(), reason))
            return cur.rowcount == 1

    def complete(self, campaign: str, participant_id: str, code: str) -> str:
        """Mark the participant finished; returns the code recorded at the first call (idempotent:
        a reload shows the same code). CrowdError if the id never started."""
        with self._transaction() as con:
            con.execute("UPDATE campaign_participants SET completed_at = ?, completion_code = ? "
                        "WHERE campaign = ? AND participant_id = ? AND completed_at IS NULL",
                        (now_iso(), code, campaign, participant_id))
            row = con.execute("SELECT completion_code FROM campaign_participants "
                              "WHERE campaign = ? AND participant_id = ?", (campaign, participant_id)).fetchone()
        if row is None:
            raise CrowdError(BAD_LINK)
        return row[0]

    def participants(self, campaign: str) -> list[dict]:
        """Every participant of a campaign, oldest first: participant_id, rater, sessions,
        started_at, last_started_at, completed_at, completion_code, study_id, session_id,
        released_at and release_reason (None while the place is held)."""
        with self._connect() as con:
            cur = con.execute(PARTICIPANT_ROWS + " ORDER BY p.started_at, p.participant_id", (campaign,))
            names = [d[0] for d in cur.description]
            return [{k: v for k, v in zip(names, row, strict=True) if k != "campaign"} for row in cur.fetchall()]


# ---------------------------------------------------------------------------- completion codes
def check_completion_code(code: str) -> str:
    if not isinstance(code, str) or not COMPLETION_CODE.fullmatch(code):
        raise CrowdError(f"Completion code {code!r}: use 4-32 capital letters A-Z or digits, exactly as set in the "
                         "Prolific study.", reason="config")
    return code


def completion_code(campaign_folder: str | os.PathLike, configured: str | None = None) -> str:
    """The campaign's completion code: `configured` (validated, and saved for later runs), else
    the saved one, else a new one (8 of A-Z 2-9), generated once per campaign (race-safe)."""
    path = Path(campaign_folder) / CODE_FILE
    if configured is not None:
        code = check_completion_code(configured)
        if _read_code(path) != code:
            write_json_atomic(path, {"completion_code": code, "set_at": now_iso()})
        return code
    if not path.exists():
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        create_once(path, json.dumps({"completion_code": code, "set_at": now_iso()}, indent=1))
    code = _read_code(path)
    if code is None:
        raise CrowdError(f"{path} is unreadable; delete it (a new code is made) or pass --completion-code with the "
                         "code of your Prolific study.", reason="config")
    return code


def _read_code(path: Path) -> str | None:
    try:
        code = json.loads(path.read_text(encoding="utf-8")).get("completion_code")
    except (OSError, ValueError, AttributeError):
        return None
    return code if isinstance(code, str) and COMPLETION_CODE.fullmatch(code) else None


def prolific_completion_url(code: str) -> str:
    """Where the last page sends a Prolific participant (Prolific records the code)."""
    return f"{PROLIFIC_COMPLETE_URL}?cc={check_completion_code(code)}"


def default_max_participants(rater_slots: int) -> int:
    """One queue per participant: at most as many participants as the campaign has rater slots."""
    return int(rater_slots)


__all__ = ["CrowdError", "CrowdLinks", "ParticipantStore", "MAX_SESSIONS_PER_ID",
           "completion_code", "check_completion_code", "crowd_secret_path", "default_max_participants",
           "load_crowd_secret", "prolific_completion_url"]
