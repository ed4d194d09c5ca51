"""The crowd gate: links, the participants table and the places of a campaign together, as the
campaign server calls them (`webapp.campaign.data.crowd` holds the parts).

Library module (the server calls it)::

    gate = CrowdGate(CrowdLinks.for_layout(layout, "pilot"), ParticipantStore(layout.database),
                     max_participants=campaign.rater_slots, completion_code="K7M2Q9XH",
                     campaign_store=CampaignStore(layout.database))
    session = gate.enter(request.query_params, address="203.0.113.7")   # CrowdError: refused
    session = gate.resume(session.token)               # later requests: the token the page keeps
    code = gate.finish(session.token, remaining=0)     # only once the queue is done
    gate.reclaim()                                     # ids whose places went back (also run by enter)

Places. The study link admits any Prolific-shaped id, so what its holder can take is bounded:
a client address starts at most `STUDY_STARTS_PER_ADDRESS` new ids from it per hour
(`StartLimit`; reloads of a known id and signed participant links do not count), and a place
is given back, with its rater slot, when its holder failed the hearing check or has not
finished `time_limit_s` after the first start (`CrowdGate.reclaim`; their ratings are kept, as
`remove-rater` keeps them). A made-up id holds a place for the time limit at most; its session
and links are refused after that (docs/campaigns.md, "Study places and expiry").
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from webapp.campaign.data.crowd import (
    BAD_LINK,
    EXPIRES_PARAM,
    ID_PARAM,
    MAX_SESSIONS_PER_ID,
    SESSION_ID_PARAM,
    SIG_PARAM,
    STUDY_ID_PARAM,
    STUDY_PARAM,
    SUPERSEDED,
    TIMED_OUT,
    CrowdError,
    CrowdLinks,
    ParticipantStore,
    check_completion_code,
)
from webapp.campaign.data.store import CampaignStore

TIME_LIMIT_S = 2 * 3600  # first start to completion code; an unfinished place is given back after it
STUDY_STARTS_PER_ADDRESS = 3  # new ids one client address may start from the study link per window
START_WINDOW_S = 3600
MAX_TRACKED_ADDRESSES = 50_000  # the start limit's table (the least recently seen forgotten first)
BUSY = "Too many participants started from your network address in the last hour; try again in an hour."


@dataclass(frozen=True)
class CrowdSession:
    participant_id: str
    rater: str  # crowd-<12 hex>: the name their queue and ratings go under
    session_no: int
    token: str  # what the page keeps (CrowdLinks.session_token)
    completion_code: str | None = None  # set once they finished


class StartLimit:
    """New ids started from the study link, counted per client address in a sliding window: one
    address gets `per_address` of them per `window_s` (an LRU table of MAX_TRACKED_ADDRESSES)."""

    def __init__(self, per_address: int = STUDY_STARTS_PER_ADDRESS, window_s: float = START_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.per_address, self.window_s, self.clock = per_address, window_s, clock
        self._starts: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, address: str) -> None:
        """Count one start for `address`; CrowdError(BUSY, reason "busy") when its share is used."""
        now = self.clock()
        with self._lock:
            recent = [t for t in self._starts.pop(address, []) if now - t < self.window_s]
            full = len(recent) >= self.per_address
            self._starts[address] = recent if full else [*recent, now]
            while len(self._starts) > MAX_TRACKED_ADDRESSES:
                self._starts.popitem(last=False)
        if full:
            raise CrowdError(BUSY, reason="busy")


def iso_at(seconds: float) -> str:
    """A unix time as the stores write times (`webapp.ratings.now_iso`), so the two compare as text."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


class CrowdGate:
    """Links, participants table, places and bounds together: what the crowd pages call.

    `campaign_store`: the campaign's ratings store, whose rater slots released places give back
    and whose hearing-check results say who failed (None: places are only counted, as before a
    queue exists). `time_limit_s`: a participant's time from the first start to the completion
    code; after it their session is refused and their place given back. `clock`: time.time."""

    def __init__(self, links: CrowdLinks, store: ParticipantStore, max_participants: int, completion_code: str,
                 max_sessions: int = MAX_SESSIONS_PER_ID, *, campaign_store: CampaignStore | None = None,
                 time_limit_s: float = TIME_LIMIT_S, starts: StartLimit | None = None,
                 clock: Callable[[], float] = time.time):
        self.links, self.store, self.campaign_store = links, store, campaign_store
        self.max_participants, self.max_sessions = max_participants, max_sessions
        self.code = check_completion_code(completion_code)
        self.time_limit_s, self.starts, self.clock = time_limit_s, starts or StartLimit(), clock

    @property
    def campaign(self) -> str:
        return self.links.campaign

    def enter(self, query: Mapping[str, str], address: str = "") -> CrowdSession:
        """Start from a link's query parameters; CrowdError (shown to the participant) if refused.
        A new id from the study link counts against its client `address` (`StartLimit`). Places
        past their time or failed are given back first (`reclaim`)."""
        pid = self.links.verify(query.get(ID_PARAM), query.get(SIG_PARAM), query.get(STUDY_PARAM),
                                query.get(EXPIRES_PARAM), now=self.clock())
        if query.get(SIG_PARAM) is None and self.store.participant(self.campaign, pid) is None:
            self.starts.take(address)
        self.reclaim()
        rater = self.links.rater_name(pid)
        n = self.store.start(self.campaign, pid, self.max_participants, self.max_sessions, rater=rater,
                             study_id=query.get(STUDY_ID_PARAM), session_id=query.get(SESSION_ID_PARAM),
                             at=iso_at(self.clock()))
        return CrowdSession(pid, rater, n, self.links.session_token(pid, n))

    def reclaim(self) -> list[str]:
        """Give back the places of unfinished participants past the time limit and of those who
        failed the hearing check, and free their rater slots; returns their ids."""
        late = self.store.unfinished_since(self.campaign, iso_at(self.clock() - self.time_limit_s))
        reasons = {p["participant_id"]: "timed out" for p in late}
        if self.campaign_store is not None:
            failed = {r for r, passed in self.campaign_store.qualifications(self.campaign).items() if not passed}
            for row in self.store.participants(self.campaign):
                if row["rater"] in failed and row["released_at"] is None and row["completed_at"] is None:
                    reasons.setdefault(row["participant_id"], "hearing check")
        released = [pid for pid, reason in reasons.items() if self.store.release(self.campaign, pid, reason)]
        if self.campaign_store is not None:
            for pid in released:
                self.campaign_store.release_slots(self.links.rater_name(pid))
        return released

    def resume(self, token: object) -> CrowdSession:
        """The session of a kept token; CrowdError if forged, from another campaign, superseded by
        a newer start of the same id (reason "superseded"), or released or past the time limit
        unfinished (reason "released": the place is given back)."""
        pid, n = self.links.verify_token(token)
        row = self.store.participant(self.campaign, pid)
        if row is None:
            raise CrowdError(BAD_LINK)
        if row["completed_at"] is None:
            late = row["started_at"] < iso_at(self.clock() - self.time_limit_s)
            if late and row["released_at"] is None:
                self.reclaim()
            if late or row["released_at"] is not None:
                raise CrowdError(TIMED_OUT, reason="released")
        if int(row["sessions"]) != n:
            raise CrowdError(SUPERSEDED, reason="superseded")
        return CrowdSession(pid, self.links.rater_name(pid), n, str(token), row["completion_code"])

    def finish(self, token: object, remaining: int) -> str:
        """The completion code, recorded, once the participant's queue is done (`remaining` = items
        left in it); CrowdError(reason "unfinished") before."""
        session = self.resume(token)
        if remaining > 0:
            raise CrowdError(f"{remaining} items are left; rate them to get your completion code.",
                             reason="unfinished")
        return self.store.complete(self.campaign, session.participant_id, self.code)


__all__ = ["CrowdGate", "CrowdSession", "StartLimit", "STUDY_STARTS_PER_ADDRESS", "TIME_LIMIT_S"]
