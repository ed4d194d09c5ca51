"""The campaign tables in the app's ratings database, one store for every design: who holds which
rater slot, when a trial was shown, which clips its page fetched and played, each rater's hearing
check (the clips drawn for them and their answers), and every acknowledged rating, one row per
rated stimulus.

Library module (no command line)::

    store = CampaignStore(layout.database)               # the same file as webapp.ratings
    slot = store.claim_slot("pilot", "asha", n_slots=6)   # her slot (the lowest free one the first time)
    store.mark_shown("pilot", trial.entry_id, "asha")
    store.mark_fetched("pilot", trial.entry_id, 0, "asha")   # the served copy was sent to the end
    store.mark_played("pilot", trial, 0, "asha")         # NotFetched unless it was fetched for her
    stored = store.submit("pilot", trial, "asha", rows)   # rows from the design; False: rated before
    store.stored_rows("pilot")                            # every stored row (the columns below)
    CampaignStore(path, layout=design).rows("pilot")      # the same, in the design's own table layout
    store.release_slots("asha", drop_ratings=False)       # `remove-rater asha`: her slot for someone else

The durability rules are `rumik_app.sqlite.SQLiteStore`'s: WAL, synchronous=FULL, one
`BEGIN IMMEDIATE` transaction per submission, acknowledged only after COMMIT. The primary key
(campaign, entry id, stimulus) stores a repeated submission (a double click, a retry after a lost
reply) once, and `submit` checks inside the transaction that the trial's slot belongs to the
submitting rater, so no call can write into another rater's queue.

A row is one rated stimulus: its score on the design's scale, the trial's place, and `answer`,
the page's other answers about it as JSON (an A/B page's preference, the inline-tag question).
Databases written before every design shared this table are brought up to it on open, in one
transaction: `campaign_scores` gains its newer columns, and the blind-pair table
`campaign_ratings` (one row per pair: conditions, scores and NoVA answers of clips A and B) is
moved into it, two rows per pair, and dropped (`migrate`).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Protocol

from rumik_app.errors import RumikError
from rumik_app.sqlite import SQLiteStore
from webapp.ratings import now_iso

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
    repeat_of TEXT,
    answer TEXT CHECK (answer IS NULL OR json_valid(answer)),
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
CREATE TABLE IF NOT EXISTS campaign_fetches (
    campaign TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    stimulus INTEGER NOT NULL,
    rater TEXT NOT NULL,
    fetched_at TEXT NOT NULL,
    PRIMARY KEY (campaign, entry_id, stimulus, rater)
);
CREATE TABLE IF NOT EXISTS campaign_hearing_draws (
    campaign TEXT NOT NULL,
    rater TEXT NOT NULL,
    clip_keys TEXT NOT NULL CHECK (json_valid(clip_keys)),
    drawn_at TEXT NOT NULL,
    PRIMARY KEY (campaign, rater)
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
           "submitted_at", "seconds", "repeat_of", "answer")
# Columns added to campaign_scores after its first version, with their declarations.
NEWER_COLUMNS = {"repeat_of": "TEXT", "answer": "TEXT CHECK (answer IS NULL OR json_valid(answer))"}
PAIR_TABLE = "campaign_ratings"  # the blind-pair layout of stores written before (moved by `migrate`)
# One pair row -> its clip A and clip B rows: (stimulus, side, condition, score, heard, where columns).
PAIR_SIDES = ((0, "A", "condition_a", "score_a", "heard_a", "where_a"),
              (1, "B", "condition_b", "score_b", "heard_b", "where_b"))
PAIR_DESIGN = "ab"  # the design of every row of the pair table (it held no other)


class NotYourItem(RumikError, PermissionError):
    """The entry belongs to another rater's queue (or to no queue of this campaign)."""


class NotFetched(RumikError, PermissionError):
    """A play reported for a clip whose audio was never sent to that rater's page."""


class TrialLike(Protocol):
    """What the store reads of a trial (`webapp.campaign.trials.plan.Trial`)."""

    entry_id: str
    slot: int
    position: int
    item_id: str
    prompt_id: str
    kind: str
    repeat_of: str | None


class TableLayout(Protocol):
    """A design's view of its stored rows (`Design.table`): the rows of its ratings.csv."""

    def table(self, rows: list[dict]) -> list[dict]: ...


def seconds_between(start: str | None, end: str) -> float | None:
    """Seconds from `start` to `end` (ISO times), rounded to ms; None without a start."""
    if not start:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


class CampaignStore(SQLiteStore):
    SCHEMA = SCHEMA
    SCHEMA_KEY = "campaign_schema_version"
    SCHEMA_VERSION = 2

    def __init__(self, path, layout: TableLayout | None = None):
        """`layout`: the design whose table layout `rows` returns (None: the stored rows)."""
        super().__init__(path)
        self.layout = layout
        migrate(self)

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
        rest of the queue) unless `drop_ratings`, which deletes them, their plays and view times
        so the whole queue is rated again. Returns one {"campaign", "slot", "ratings"} per freed slot."""
        released = []
        with self._transaction() as con:
            held = con.execute("SELECT campaign, slot FROM campaign_slots WHERE rater = ? ORDER BY campaign",
                               (rater,)).fetchall()
            for campaign, slot in held:
                (ratings,) = con.execute("SELECT COUNT(DISTINCT entry_id) FROM campaign_scores WHERE campaign = ? "
                                         "AND rater = ?", (campaign, rater)).fetchone()
                if drop_ratings:
                    for table in ("campaign_scores", "campaign_plays", "campaign_fetches", "campaign_views"):
                        con.execute(f"DELETE FROM {table} WHERE campaign = ? AND rater = ?", (campaign, rater))
                con.execute("DELETE FROM campaign_slots WHERE campaign = ? AND slot = ?", (campaign, slot))
                released.append({"campaign": campaign, "slot": int(slot), "ratings": int(ratings)})
        return released

    def _owned(self, con: sqlite3.Connection, campaign: str, trial: TrialLike, rater: str) -> None:
        owner = con.execute("SELECT rater FROM campaign_slots WHERE campaign = ? AND slot = ?",
                            (campaign, trial.slot)).fetchone()
        if owner is None or owner[0] != rater:
            raise NotYourItem(f"entry {trial.entry_id} is not in {rater}'s queue")

    # ------------------------------------------------------------------ views, plays, hearing check
    def mark_shown(self, campaign: str, entry_id: str, rater: str, restart: bool = False) -> None:
        """Remember when a trial was put in front of its rater: the first time (a reload does not
        restart the clock the speed rule and webMUSHRA's `rating_time` read), or with `restart`
        the last time (`Design.clock_restarts`)."""
        on_conflict = "DO UPDATE SET shown_at = excluded.shown_at" if restart else "DO NOTHING"
        with self._transaction() as con:
            con.execute(f"INSERT INTO campaign_views VALUES (?, ?, ?, ?) ON CONFLICT (campaign, entry_id) "
                        f"{on_conflict}", (campaign, entry_id, rater, now_iso()))

    def seconds_since_shown(self, campaign: str, entry_id: str) -> float | None:
        """Seconds from the trial's recorded showing (`mark_shown`) to now; None if never shown."""
        with self._connect() as con:
            row = con.execute("SELECT shown_at FROM campaign_views WHERE campaign = ? AND entry_id = ?",
                              (campaign, entry_id)).fetchone()
        return seconds_between(row[0] if row else None, now_iso())

    def mark_fetched(self, campaign: str, entry_id: str, stimulus: int, rater: str) -> None:
        """Remember that the audio of stimulus `stimulus`, as shown to `rater`, was sent to the end."""
        with self._transaction() as con:
            con.execute("INSERT OR IGNORE INTO campaign_fetches VALUES (?, ?, ?, ?, ?)",
                        (campaign, entry_id, stimulus, rater, now_iso()))

    def fetched(self, campaign: str, entry_id: str, rater: str) -> set[int]:
        with self._connect() as con:
            return {int(r[0]) for r in con.execute(
                "SELECT stimulus FROM campaign_fetches WHERE campaign = ? AND entry_id = ? AND rater = ?",
                (campaign, entry_id, rater))}

    def mark_played(self, campaign: str, trial: TrialLike, stimulus: int, rater: str) -> None:
        """Remember that the rater started stimulus `stimulus` of their trial (the must-play rule).
        A play counts only once the clip's audio was fetched for this rater (`mark_fetched`): a
        page cannot play what it never received, so a report alone is NotFetched."""
        with self._transaction() as con:
            self._owned(con, campaign, trial, rater)
            if con.execute("SELECT 1 FROM campaign_fetches WHERE campaign = ? AND entry_id = ? AND stimulus = ? "
                           "AND rater = ?", (campaign, trial.entry_id, stimulus, rater)).fetchone() is None:
                raise NotFetched(f"stimulus {stimulus} of {trial.entry_id} was never fetched by {rater}")
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

    def hearing_draw(self, campaign: str, rater: str, choose: Callable[[Counter], list[str]]) -> list[str]:
        """The hearing-check clips dealt to `rater`: the first time `choose(uses)` (uses: how many
        raters of the campaign were dealt each clip so far), stored in the same transaction, so
        concurrent first draws are counted one after the other; the stored draw after (a reload
        shows the same clips, and answers are checked against them)."""
        with self._transaction() as con:
            row = con.execute("SELECT clip_keys FROM campaign_hearing_draws WHERE campaign = ? AND rater = ?",
                              (campaign, rater)).fetchone()
            if row is not None:
                return list(json.loads(row[0]))
            uses = Counter(key for (keys,) in con.execute(
                "SELECT clip_keys FROM campaign_hearing_draws WHERE campaign = ?", (campaign,))
                for key in json.loads(keys))
            drawn = list(choose(uses))
            con.execute("INSERT INTO campaign_hearing_draws VALUES (?, ?, ?, ?)",
                        (campaign, rater, json.dumps(drawn), now_iso()))
        return drawn

    def hearing_draws(self, campaign: str) -> dict[str, list[str]]:
        """{rater: the hearing-check clip keys dealt to them}."""
        with self._connect() as con:
            return {r: list(json.loads(k)) for r, k in con.execute(
                "SELECT rater, clip_keys FROM campaign_hearing_draws WHERE campaign = ?", (campaign,))}

    def qualifications(self, campaign: str) -> dict[str, bool]:
        with self._connect() as con:
            return {r: bool(p) for r, p in con.execute(
                "SELECT rater, passed FROM campaign_qualification WHERE campaign = ?", (campaign,))}

    # ------------------------------------------------------------------ ratings
    def submit(self, campaign: str, trial: TrialLike, rater: str, rows: Iterable[Mapping]) -> bool:
        """Store every stimulus row of one trial in one transaction; False if it was rated before.
        `rows`: the per-stimulus columns (design, stimulus, role, condition, score, ...; `answer`
        a JSON-able dict or None), from `Design.rows`; the rest comes from the trial and the clock.
        NotYourItem unless the trial's slot is the rater's."""
        with self._transaction() as con:
            self._owned(con, campaign, trial, rater)
            if con.execute("SELECT 1 FROM campaign_scores WHERE campaign = ? AND entry_id = ?",
                           (campaign, trial.entry_id)).fetchone():
                return False
            shown = con.execute("SELECT shown_at FROM campaign_views WHERE campaign = ? AND entry_id = ?",
                                (campaign, trial.entry_id)).fetchone()
            shown_at, submitted_at = (shown[0] if shown else None), now_iso()
            common = {"campaign": campaign, "entry_id": trial.entry_id, "slot": trial.slot,
                      "position": trial.position, "rater": rater, "item_id": trial.item_id,
                      "prompt_id": trial.prompt_id, "kind": trial.kind, "repeat_of": trial.repeat_of,
                      "shown_at": shown_at, "submitted_at": submitted_at,
                      "seconds": seconds_between(shown_at, submitted_at)}
            values = []
            for row in rows:
                merged = {**common, **row}
                if merged.get("answer") is not None:
                    merged["answer"] = json.dumps(merged["answer"], ensure_ascii=False, sort_keys=True)
                values.append(tuple(merged.get(c) for c in COLUMNS))
            con.executemany(f"INSERT INTO campaign_scores ({', '.join(COLUMNS)}) "
                            f"VALUES ({', '.join('?' * len(COLUMNS))})", values)
        return True

    def rated_entries(self, campaign: str, slot: int | None = None) -> set[str]:
        query = ("SELECT DISTINCT entry_id FROM campaign_scores WHERE campaign = ?"
                 + (" AND slot = ?" if slot is not None else ""))
        with self._connect() as con:
            return {r[0] for r in con.execute(query, (campaign,) if slot is None else (campaign, slot))}

    def stored_rows(self, campaign: str) -> list[dict]:
        """Every stored stimulus row of the campaign (COLUMNS, `answer` decoded), in submission order."""
        with self._connect() as con:
            cur = con.execute(f"SELECT {', '.join(COLUMNS)} FROM campaign_scores WHERE campaign = ? "
                              "ORDER BY submitted_at, entry_id, stimulus", (campaign,))
            rows = [dict(zip(COLUMNS, row, strict=True)) for row in cur.fetchall()]
        for row in rows:
            row["answer"] = json.loads(row["answer"]) if row["answer"] is not None else None
        return rows

    def rows(self, campaign: str) -> list[dict]:
        """Every rating of the campaign in the layout's table (`Design.table`), or the stored rows."""
        rows = self.stored_rows(campaign)
        return self.layout.table(rows) if self.layout is not None else rows

    def activity(self, campaign: str) -> dict[str, dict]:
        """{rater: {"rated": trials, "last": time of the last submission}}."""
        with self._connect() as con:
            return {r: {"rated": n, "last": last} for r, n, last in con.execute(
                "SELECT rater, COUNT(DISTINCT entry_id), MAX(submitted_at) FROM campaign_scores WHERE campaign = ? "
                "GROUP BY rater", (campaign,))}


# ---------------------------------------------------------------- databases written before


def _table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def _pair_rows(con: sqlite3.Connection) -> list[tuple]:
    """The pair table's rows as campaign_scores rows (COLUMNS order): clip A's, then clip B's."""
    cur = con.execute(f"SELECT * FROM {PAIR_TABLE} ORDER BY campaign, submitted_at, entry_id")
    names = [d[0] for d in cur.description]
    out = []
    for values in cur.fetchall():
        pair = dict(zip(names, values, strict=True))
        for stimulus, side, condition, score, heard, where in PAIR_SIDES:
            answer = {"preference": pair["preference"], "heard": pair[heard], "where": pair[where]}
            row = {**pair, "design": PAIR_DESIGN, "stimulus": stimulus, "kind": "test", "role": "test",
                   "condition": pair[condition], "reference": None, "clip_id": None, "score": pair[score],
                   "raw_score": None, "side": side, "expected": None,
                   "answer": json.dumps(answer, ensure_ascii=False, sort_keys=True)}
            out.append(tuple(row[c] for c in COLUMNS))
    return out


def migrate(store: SQLiteStore) -> bool:
    """Bring a database written by earlier versions to this schema, in one transaction (all of it
    or nothing): add campaign_scores' newer columns, move the pair table's ratings into it and drop
    the pair table. Idempotent; True if anything changed."""
    with store._connect() as con:
        present = _table_columns(con, "campaign_scores")
        pairs = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (PAIR_TABLE,)).fetchone()
    if set(NEWER_COLUMNS) <= set(present) and not pairs:
        return False
    with store._transaction() as con:  # checked again inside: another process may have migrated meanwhile
        present = _table_columns(con, "campaign_scores")
        for column, declaration in NEWER_COLUMNS.items():
            if column not in present:
                con.execute(f"ALTER TABLE campaign_scores ADD COLUMN {column} {declaration}")
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (PAIR_TABLE,)).fetchone():
            con.executemany(f"INSERT INTO campaign_scores ({', '.join(COLUMNS)}) "
                            f"VALUES ({', '.join('?' * len(COLUMNS))})", _pair_rows(con))
            con.execute(f"DROP TABLE {PAIR_TABLE}")
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (store.SCHEMA_KEY, str(CampaignStore.SCHEMA_VERSION)))
    return True
