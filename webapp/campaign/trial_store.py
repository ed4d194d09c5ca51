"""Campaign tables of the MOS, CMOS, SMOS and MUSHRA designs: one row per rated stimulus, the
plays a MUSHRA page must see before it is submitted, and each rater's qualification result.

Library module (no command line)::

    store = TrialStore(layout.database)            # the same file as webapp.ratings and CampaignStore
    slot = store.claim_slot("mos1", "asha", 6)     # slots, views and removals as CampaignStore
    store.mark_played("mos1", trial.entry_id, 0, "asha")
    store.submit_trial("mos1", "mos", trial, "asha", [score_rows])    # False: stored before
    store.rows("mos1")                             # dicts in the rating-row format of docs/campaigns.md

The durability rules are CampaignStore's: WAL, synchronous=FULL, one `BEGIN IMMEDIATE`
transaction per submission, acknowledged after COMMIT; the primary key (campaign, entry id,
stimulus) stores a repeated submission once, and the slot's owner is checked inside the
transaction.
"""

from __future__ import annotations

import json

from webapp.campaign.designs import Trial
from webapp.campaign.store import SCHEMA as CAMPAIGN_SCHEMA
from webapp.campaign.store import CampaignStore, NotYourItem, _seconds_between
from webapp.ratings import now_iso

TRIAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS campaign_scores (
    campaign TEXT NOT NULL,
    design TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    stimulus INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    position INTEGER NOT NULL,
    rater TEXT NOT NULL,
    item_id TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('test', 'gold', 'trap')),
    role TEXT NOT NULL CHECK (role IN ('test', 'reference', 'anchor', 'gold', 'trap')),
    condition TEXT NOT NULL,
    reference TEXT,
    clip_id TEXT,
    score REAL NOT NULL CHECK (score BETWEEN -3 AND 100),
    raw_score REAL,
    side TEXT,
    expected REAL,
    shown_at TEXT,
    submitted_at TEXT NOT NULL,
    seconds REAL,
    PRIMARY KEY (campaign, entry_id, stimulus)
);
CREATE TABLE IF NOT EXISTS campaign_plays (
    campaign TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    stimulus INTEGER NOT NULL,
    rater TEXT NOT NULL,
    played_at TEXT NOT NULL,
    PRIMARY KEY (campaign, entry_id, stimulus)
);
CREATE TABLE IF NOT EXISTS campaign_qualification (
    campaign TEXT NOT NULL,
    rater TEXT NOT NULL,
    passed INTEGER NOT NULL,
    answers TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    PRIMARY KEY (campaign, rater)
);
"""
COLUMNS = ("campaign", "design", "entry_id", "stimulus", "slot", "position", "rater", "item_id", "prompt_id", "kind",
           "role", "condition", "reference", "clip_id", "score", "raw_score", "side", "expected", "shown_at",
           "submitted_at", "seconds")


class TrialStore(CampaignStore):
    """CampaignStore (slots, views) plus the trial designs' tables."""

    SCHEMA = CAMPAIGN_SCHEMA + TRIAL_SCHEMA

    def _owned(self, con, campaign: str, slot: int, rater: str, entry_id: str) -> None:
        owner = con.execute("SELECT rater FROM campaign_slots WHERE campaign = ? AND slot = ?",
                            (campaign, slot)).fetchone()
        if owner is None or owner[0] != rater:
            raise NotYourItem(f"entry {entry_id} is not in {rater}'s queue")

    def mark_shown(self, campaign: str, entry_id: str, rater: str) -> None:
        """Remember when a trial was first put in front of its rater: a reload does not restart the
        clock that the speed rule and webMUSHRA's `rating_time` read."""
        with self._transaction() as con:
            con.execute("INSERT INTO campaign_views VALUES (?, ?, ?, ?) ON CONFLICT (campaign, entry_id) DO NOTHING",
                        (campaign, entry_id, rater, now_iso()))

    # ------------------------------------------------------------------ plays and qualification
    def mark_played(self, campaign: str, trial: Trial, stimulus: int, rater: str) -> None:
        """Remember that the rater started stimulus `stimulus` of their trial (MUSHRA's must-play)."""
        with self._transaction() as con:
            self._owned(con, campaign, trial.slot, rater, trial.entry_id)
            con.execute("INSERT OR IGNORE INTO campaign_plays VALUES (?, ?, ?, ?, ?)",
                        (campaign, trial.entry_id, stimulus, rater, now_iso()))

    def played(self, campaign: str, entry_id: str) -> set[int]:
        with self._connect() as con:
            return {int(r[0]) for r in con.execute(
                "SELECT stimulus FROM campaign_plays WHERE campaign = ? AND entry_id = ?", (campaign, entry_id))}

    def qualification(self, campaign: str, rater: str) -> bool | None:
        """True passed, False failed, None not taken yet."""
        with self._connect() as con:
            row = con.execute("SELECT passed FROM campaign_qualification WHERE campaign = ? AND rater = ?",
                              (campaign, rater)).fetchone()
        return None if row is None else bool(row[0])

    def record_qualification(self, campaign: str, rater: str, passed: bool, answers: list[str]) -> bool:
        """Store the first result only (a failed rater cannot try again); returns the stored result."""
        with self._transaction() as con:
            con.execute("INSERT OR IGNORE INTO campaign_qualification VALUES (?, ?, ?, ?, ?)",
                        (campaign, rater, int(passed), json.dumps(answers, ensure_ascii=False), now_iso()))
            return bool(con.execute("SELECT passed FROM campaign_qualification WHERE campaign = ? AND rater = ?",
                                     (campaign, rater)).fetchone()[0])

    def qualifications(self, campaign: str) -> dict[str, bool]:
        with self._connect() as con:
            return {r: bool(p) for r, p in con.execute(
                "SELECT rater, passed FROM campaign_qualification WHERE campaign = ?", (campaign,))}

    # ------------------------------------------------------------------ ratings
    def submit_trial(self, campaign: str, trial: Trial, rater: str, rows: list[dict]) -> bool:
        """Store every stimulus row of one trial in one transaction; False if it was rated before.
        `rows`: dicts holding the per-stimulus columns (stimulus, role, condition, reference, clip_id,
        score, raw_score, side, expected, design); the rest comes from the trial and the clock."""
        with self._transaction() as con:
            self._owned(con, campaign, trial.slot, rater, trial.entry_id)
            if con.execute("SELECT 1 FROM campaign_scores WHERE campaign = ? AND entry_id = ?",
                           (campaign, trial.entry_id)).fetchone():
                return False
            shown = con.execute("SELECT shown_at FROM campaign_views WHERE campaign = ? AND entry_id = ?",
                                (campaign, trial.entry_id)).fetchone()
            shown_at, submitted_at = (shown[0] if shown else None), now_iso()
            common = {"campaign": campaign, "entry_id": trial.entry_id, "slot": trial.slot,
                      "position": trial.position, "rater": rater, "item_id": trial.item_id,
                      "prompt_id": trial.prompt_id, "kind": trial.kind, "shown_at": shown_at,
                      "submitted_at": submitted_at, "seconds": _seconds_between(shown_at, submitted_at)}
            con.executemany(f"INSERT INTO campaign_scores VALUES ({', '.join('?' * len(COLUMNS))})",
                            [tuple({**common, **row}.get(c) for c in COLUMNS) for row in rows])
        return True

    def rated_entries(self, campaign: str, slot: int | None = None) -> set[str]:
        query = ("SELECT DISTINCT entry_id FROM campaign_scores WHERE campaign = ?"
                 + (" AND slot = ?" if slot is not None else ""))
        with self._connect() as con:
            return {r[0] for r in con.execute(query, (campaign,) if slot is None else (campaign, slot))}

    def rows(self, campaign: str) -> list[dict]:
        """Every stored stimulus rating of the campaign, in submission order."""
        with self._connect() as con:
            cur = con.execute("SELECT * FROM campaign_scores WHERE campaign = ? "
                              "ORDER BY submitted_at, entry_id, stimulus", (campaign,))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def activity(self, campaign: str) -> dict[str, dict]:
        with self._connect() as con:
            return {r: {"rated": n, "last": last} for r, n, last in con.execute(
                "SELECT rater, COUNT(DISTINCT entry_id), MAX(submitted_at) FROM campaign_scores WHERE campaign = ? "
                "GROUP BY rater", (campaign,))}

    def release_slots(self, rater: str, drop_ratings: bool = False) -> list[dict]:
        """CampaignStore's release, which also drops the trial rows and plays with `drop_ratings`."""
        released = super().release_slots(rater, drop_ratings)
        with self._transaction() as con:
            for r in released:
                (n,) = con.execute("SELECT COUNT(DISTINCT entry_id) FROM campaign_scores WHERE campaign = ? AND "
                                   "rater = ?", (r["campaign"], rater)).fetchone()
                r["ratings"] += int(n)
                if drop_ratings:
                    for table in ("campaign_scores", "campaign_plays"):
                        con.execute(f"DELETE FROM {table} WHERE campaign = ? AND rater = ?", (r["campaign"], rater))
        return released
