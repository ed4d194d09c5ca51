"""Campaign tables in the app's ratings database: who holds which rater slot, when an item was
shown, and every acknowledged campaign rating.

Library module (no command line)::

    store = CampaignStore(layout.database)                    # the same file as webapp.ratings
    slot = store.claim_slot("pilot", "asha", n_slots=6)       # her slot (the lowest free one the first time)
    store.mark_shown("pilot", entry.entry_id, "asha")
    stored = store.submit("pilot", entry, "asha", answer, ("espeak", "tiny"))  # False: rated before
    rows = store.rows("pilot")
    store.release_slots("asha", drop_ratings=False)           # `remove-rater asha`: her slot for someone else

The same durability rules as the ratings (`rumik_app.sqlite.SQLiteStore`): WAL,
synchronous=FULL, one `BEGIN IMMEDIATE` transaction per submission, acknowledged only after
COMMIT. The primary key (campaign, entry id) makes a repeated submission (double click, a
retry after a lost reply) store once. `submit` checks inside the transaction that the entry's
slot belongs to the submitting rater, so no call can write into another rater's queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rumik_app.errors import RumikError
from rumik_app.sqlite import SQLiteStore
from webapp.campaign.design import Entry
from webapp.ratings import NO_PREFERENCE, now_iso

PREFERENCES = ("A", "B", NO_PREFERENCE)

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaign_slots (
    campaign TEXT NOT NULL,
    slot INTEGER NOT NULL,
    rater TEXT NOT NULL,
    assigned_at TEXT NOT NULL,
    PRIMARY KEY (campaign, slot),
    UNIQUE (campaign, rater)
);
CREATE TABLE IF NOT EXISTS campaign_views (
    campaign TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    rater TEXT NOT NULL,
    shown_at TEXT NOT NULL,
    PRIMARY KEY (campaign, entry_id)
);
CREATE TABLE IF NOT EXISTS campaign_ratings (
    campaign TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    slot INTEGER NOT NULL,
    position INTEGER NOT NULL,
    rater TEXT NOT NULL,
    item_id TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    repeat_of TEXT,
    condition_a TEXT NOT NULL,
    condition_b TEXT NOT NULL,
    preference TEXT NOT NULL CHECK (preference IN ('A', 'B', 'none')),
    preferred_condition TEXT,
    score_a INTEGER NOT NULL CHECK (score_a BETWEEN 1 AND 5),
    score_b INTEGER NOT NULL CHECK (score_b BETWEEN 1 AND 5),
    heard_a TEXT,
    where_a INTEGER,
    heard_b TEXT,
    where_b INTEGER,
    shown_at TEXT,
    submitted_at TEXT NOT NULL,
    seconds REAL,
    PRIMARY KEY (campaign, entry_id)
);
"""


class NotYourItem(RumikError, PermissionError):
    """The entry belongs to another rater's queue (or to no queue of this campaign)."""


@dataclass(frozen=True)
class Answer:
    """One rater's answers for one blind pair. heard_*: laugh/chuckle/sigh, "none" (not
    heard) or None (untagged prompt); where_*: words before the sound, -1 = unsure where."""

    preference: str  # "A", "B" or "none"
    score_a: int
    score_b: int
    heard_a: str | None = None
    where_a: int | None = None
    heard_b: str | None = None
    where_b: int | None = None


class CampaignStore(SQLiteStore):
    SCHEMA = SCHEMA
    SCHEMA_KEY = "campaign_schema_version"
    SCHEMA_VERSION = 1

    # ------------------------------------------------------------------ slots
    def claim_slot(self, campaign: str, rater: str, n_slots: int) -> int | None:
        """The rater's slot in `campaign`, giving them the lowest free one if they have none;
        None when every slot is taken."""
        with self._transaction() as con:
            row = con.execute("SELECT slot FROM campaign_slots WHERE campaign = ? AND rater = ?",
                              (campaign, rater)).fetchone()
            if row is not None:
                return int(row[0])
            taken = {r[0] for r in con.execute("SELECT slot FROM campaign_slots WHERE campaign = ?", (campaign,))}
            free = next((s for s in range(n_slots) if s not in taken), None)
            if free is not None:
                con.execute("INSERT INTO campaign_slots VALUES (?, ?, ?, ?)", (campaign, free, rater, now_iso()))
            return free

    def slot_of(self, campaign: str, rater: str) -> int | None:
        with self._connect() as con:
            row = con.execute("SELECT slot FROM campaign_slots WHERE campaign = ? AND rater = ?",
                              (campaign, rater)).fetchone()
        return None if row is None else int(row[0])

    def slots(self, campaign: str) -> dict[int, str]:
        """{slot: rater} of every assigned slot."""
        with self._connect() as con:
            return {int(s): r for s, r in con.execute("SELECT slot, rater FROM campaign_slots WHERE campaign = ?",
                                                      (campaign,))}

    def release_slots(self, rater: str, drop_ratings: bool = False) -> list[dict]:
        """Free every slot `rater` holds (all campaigns), in one transaction, so another rater can
        take it over. Their ratings stay (attributed to them; the next holder continues with the
        rest of the queue) unless `drop_ratings`, which deletes them and their view times so the
        whole queue is rated again. Returns one {"campaign", "slot", "ratings"} per freed slot."""
        released = []
        with self._transaction() as con:
            held = con.execute("SELECT campaign, slot FROM campaign_slots WHERE rater = ? ORDER BY campaign",
                               (rater,)).fetchall()
            for campaign, slot in held:
                (ratings,) = con.execute("SELECT COUNT(*) FROM campaign_ratings WHERE campaign = ? AND rater = ?",
                                         (campaign, rater)).fetchone()
                if drop_ratings:
                    con.execute("DELETE FROM campaign_ratings WHERE campaign = ? AND rater = ?", (campaign, rater))
                    con.execute("DELETE FROM campaign_views WHERE campaign = ? AND rater = ?", (campaign, rater))
                con.execute("DELETE FROM campaign_slots WHERE campaign = ? AND slot = ?", (campaign, slot))
                released.append({"campaign": campaign, "slot": int(slot), "ratings": int(ratings)})
        return released

    # ------------------------------------------------------------------ ratings
    def mark_shown(self, campaign: str, entry_id: str, rater: str) -> None:
        """Remember when an entry was last put in front of its rater (for seconds per item)."""
        with self._transaction() as con:
            con.execute("INSERT INTO campaign_views VALUES (?, ?, ?, ?) ON CONFLICT (campaign, entry_id) "
                        "DO UPDATE SET shown_at = excluded.shown_at", (campaign, entry_id, rater, now_iso()))

    def submit(self, campaign: str, entry: Entry, rater: str, answer: Answer, conditions: tuple[str, str]) -> bool:
        """Store one rating in one transaction; False if this entry was rated before.
        `conditions`: the condition ids played as A and B. NotYourItem unless the entry's
        slot is the rater's."""
        with self._transaction() as con:
            owner = con.execute("SELECT rater FROM campaign_slots WHERE campaign = ? AND slot = ?",
                                (campaign, entry.slot)).fetchone()
            if owner is None or owner[0] != rater:
                raise NotYourItem(f"entry {entry.entry_id} is not in {rater}'s queue")
            if con.execute("SELECT 1 FROM campaign_ratings WHERE campaign = ? AND entry_id = ?",
                           (campaign, entry.entry_id)).fetchone():
                return False
            shown = con.execute("SELECT shown_at FROM campaign_views WHERE campaign = ? AND entry_id = ?",
                                (campaign, entry.entry_id)).fetchone()
            shown_at, submitted_at = (shown[0] if shown else None), now_iso()
            seconds = _seconds_between(shown_at, submitted_at)
            preferred = {"A": conditions[0], "B": conditions[1]}.get(answer.preference)
            con.execute("INSERT INTO campaign_ratings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                        "?, ?)",
                        (campaign, entry.entry_id, entry.slot, entry.position, rater, entry.item_id, entry.prompt_id,
                         entry.repeat_of, conditions[0], conditions[1], answer.preference, preferred,
                         int(answer.score_a), int(answer.score_b), answer.heard_a, answer.where_a, answer.heard_b,
                         answer.where_b, shown_at, submitted_at, seconds))
        return True

    def rated_entries(self, campaign: str, slot: int | None = None) -> set[str]:
        query = ("SELECT entry_id FROM campaign_ratings WHERE campaign = ?"
                 + (" AND slot = ?" if slot is not None else ""))
        with self._connect() as con:
            return {r[0] for r in con.execute(query, (campaign,) if slot is None else (campaign, slot))}

    def rows(self, campaign: str) -> list[dict]:
        """Every rating of the campaign, one dict per entry, in submission order."""
        with self._connect() as con:
            cur = con.execute("SELECT * FROM campaign_ratings WHERE campaign = ? ORDER BY submitted_at, entry_id",
                              (campaign,))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def activity(self, campaign: str) -> dict[str, dict]:
        """{rater: {"rated": n, "last": time of the last submission}}."""
        with self._connect() as con:
            return {r: {"rated": n, "last": last} for r, n, last in con.execute(
                "SELECT rater, COUNT(*), MAX(submitted_at) FROM campaign_ratings WHERE campaign = ? GROUP BY rater",
                (campaign,))}


def _seconds_between(start: str | None, end: str) -> float | None:
    if not start:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)
