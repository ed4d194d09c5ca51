"""The one campaign store over databases written before every design shared it: an A/B campaign
made then (its pair table, its assignment.json of condition indices, a campaign.json without a
design) opens, continues, summarises and exports the same rows; a trial table of that time gains
its newer columns; and the move is one transaction, all of it or nothing.

Run: .venv/bin/python -m pytest tests/app/test_campaign_store.py -q
"""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest

from tests.app.campaign_fixtures import make_campaign, pair_answers
from webapp.campaign.data.definition import Campaign
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of, plan_of
from webapp.campaign.designs.ab import PAIR_COLUMNS
from webapp.campaign.queues import RaterQueues
from webapp.campaign.reports import export_campaign, results_for
from webapp.campaign.trials.pairs import build_assignment
from webapp.storage import ServedFolder

# The tables as the A/B store and the trial store wrote them before (webapp/campaign/store.py and
# trial_store.py of that time), with their schema version row.
PAIR_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('campaign_schema_version', '1');
CREATE TABLE campaign_slots (campaign TEXT NOT NULL, slot INTEGER NOT NULL, rater TEXT NOT NULL,
    assigned_at TEXT NOT NULL, PRIMARY KEY (campaign, slot), UNIQUE (campaign, rater));
CREATE TABLE campaign_views (campaign TEXT NOT NULL, entry_id TEXT NOT NULL, rater TEXT NOT NULL,
    shown_at TEXT NOT NULL, PRIMARY KEY (campaign, entry_id));
CREATE TABLE campaign_ratings (
    campaign TEXT NOT NULL, entry_id TEXT NOT NULL, slot INTEGER NOT NULL, position INTEGER NOT NULL,
    rater TEXT NOT NULL, item_id TEXT NOT NULL, prompt_id TEXT NOT NULL, repeat_of TEXT,
    condition_a TEXT NOT NULL, condition_b TEXT NOT NULL,
    preference TEXT NOT NULL CHECK (preference IN ('A', 'B', 'none')), preferred_condition TEXT,
    score_a INTEGER NOT NULL CHECK (score_a BETWEEN 1 AND 5), score_b INTEGER NOT NULL CHECK (score_b BETWEEN 1 AND 5),
    heard_a TEXT, where_a INTEGER, heard_b TEXT, where_b INTEGER, shown_at TEXT, submitted_at TEXT NOT NULL,
    seconds REAL, PRIMARY KEY (campaign, entry_id));
"""
TRIAL_SCHEMA = """
CREATE TABLE campaign_scores (
    campaign TEXT NOT NULL, design TEXT NOT NULL, entry_id TEXT NOT NULL, stimulus INTEGER NOT NULL,
    slot INTEGER NOT NULL, position INTEGER NOT NULL, rater TEXT NOT NULL, item_id TEXT NOT NULL,
    prompt_id TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('test', 'gold', 'trap')),
    role TEXT NOT NULL CHECK (role IN ('test', 'reference', 'anchor', 'gold', 'trap')), condition TEXT NOT NULL,
    reference TEXT, clip_id TEXT, score REAL NOT NULL CHECK (score BETWEEN -3 AND 100), raw_score REAL, side TEXT,
    expected REAL, shown_at TEXT, submitted_at TEXT NOT NULL, seconds REAL, PRIMARY KEY (campaign, entry_id, stimulus));
"""
TRIAL_COLUMNS = ("campaign", "design", "entry_id", "stimulus", "slot", "position", "rater", "item_id", "prompt_id",
                 "kind", "role", "condition", "reference", "clip_id", "score", "raw_score", "side", "expected",
                 "shown_at", "submitted_at", "seconds")


def legacy_campaign(tmp_path, rated: int = 3):
    """An A/B campaign as it was left before: no design in campaign.json, assignment.json of
    condition indices, and `rated` pair rows (slot 0's first ones, by asha; a repeat and the tagged
    prompt's NoVA answers among them where the queue has them) in the pair table."""
    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=1, repeat_fraction=0.5)
    definition = json.loads((campaign.folder / "campaign.json").read_text())
    for key in ("design", "design_options"):
        definition.pop(key)
    (campaign.folder / "campaign.json").write_text(json.dumps(definition))
    campaign = Campaign.open(layout, campaign.name)
    ids = [c.id for c in campaign.conditions]
    assignment = build_assignment([p["id"] for p in campaign.prompts], len(ids), 1, 1, 0.5, campaign.seed)
    campaign.assignment_path.write_text(json.dumps(assignment.to_json()))
    rows = []
    for k, entry in enumerate(assignment.slots[0][:rated]):
        tagged = entry.prompt_id == "p_tag"
        preference = "AB"[k % 2] if k != 1 else "none"
        rows.append({"campaign": campaign.name, "entry_id": entry.entry_id, "slot": 0, "position": entry.position,
                     "rater": "asha", "item_id": entry.item_id, "prompt_id": entry.prompt_id,
                     "repeat_of": entry.repeat_of, "condition_a": ids[entry.left], "condition_b": ids[entry.right],
                     "preference": preference,
                     "preferred_condition": {"A": ids[entry.left], "B": ids[entry.right]}.get(preference),
                     "score_a": 1 + k % 5, "score_b": 5 - k % 5, "heard_a": "laugh" if tagged else None,
                     "where_a": 4 if tagged else None, "heard_b": "none" if tagged else None, "where_b": None,
                     "shown_at": f"2026-01-01T10:0{k}:00+00:00", "submitted_at": f"2026-01-01T10:0{k}:30+00:00",
                     "seconds": 30.0})
    con = sqlite3.connect(layout.database)
    con.executescript(PAIR_SCHEMA)
    con.execute("INSERT INTO campaign_slots VALUES (?, 0, 'asha', '2026-01-01T10:00:00+00:00')", (campaign.name,))
    con.executemany(f"INSERT INTO campaign_ratings VALUES ({', '.join('?' * len(PAIR_COLUMNS))})",
                    [tuple(r[c] for c in PAIR_COLUMNS) for r in rows])
    con.commit()
    con.close()
    return layout, campaign, assignment, rows


def tables(path) -> set[str]:
    with sqlite3.connect(path) as con:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_an_ab_campaign_made_before_opens_rates_summarises_and_exports_the_same_rows(tmp_path):
    layout, campaign, assignment, legacy = legacy_campaign(tmp_path)
    assert campaign.design is None and design_of(campaign).name == "ab"  # read as the default design
    plan = plan_of(campaign)  # the old assignment.json, read as pairs of condition ids
    old = assignment.slots[0]
    assert [t.entry_id for t in plan.slots[0]] == [e.entry_id for e in old]
    assert [t.repeat_of for t in plan.slots[0]] == [e.repeat_of for e in old]
    ids = [c.id for c in campaign.conditions]
    assert [t.conditions for t in plan.slots[0]] == [(ids[e.left], ids[e.right]) for e in old]

    store = CampaignStore(layout.database, layout=design_of(campaign))  # opening migrates, in one transaction
    assert "campaign_ratings" not in tables(layout.database)
    assert store.rows(campaign.name) == legacy  # the same rows, the same types (ints stay ints)
    assert CampaignStore(layout.database, layout=design_of(campaign)).rows(campaign.name) == legacy  # idempotent
    with sqlite3.connect(layout.database) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'campaign_schema_version'").fetchone() == ("2",)

    results = results_for(campaign, store)
    assert results.ratings == len(legacy) and results.expected == len(old)
    out = export_campaign(campaign, store, tmp_path / "export")
    with open(tmp_path / "export" / "ratings.csv", newline="", encoding="utf-8") as fh:
        exported = list(csv.reader(fh))
    assert exported[0] == list(PAIR_COLUMNS)
    assert exported[1:] == [["" if v is None else str(v) for v in r.values()] for r in legacy]
    assert (tmp_path / "export" / "indicemo_judgments.jsonl") in out

    # The rater continues where the old server left her; the new rating joins the old ones.
    queues = RaterQueues(campaign, store, ServedFolder(tmp_path / "served"))
    shown = queues.next_trial("asha")
    assert (shown.entry_id, shown.done) == (old[len(legacy)].entry_id, len(legacy))
    assert queues.submit("asha", shown.entry_id, pair_answers(queues, shown.entry_id))
    rows = store.rows(campaign.name)
    assert rows[:len(legacy)] == legacy and rows[-1]["entry_id"] == shown.entry_id and len(rows) == len(legacy) + 1


def test_a_trial_table_written_before_gains_its_new_columns(tmp_path):
    path = tmp_path / "ratings.sqlite"
    row = ("mos1", "mos", "e1", 0, 0, 0, "asha", "p1/a", "p1", "test", "test", "a", None, "c1", 4.0, None, None, None,
           None, "2026-01-01T10:00:00+00:00", 5.0)
    with sqlite3.connect(path) as con:
        con.executescript(TRIAL_SCHEMA)
        con.execute(f"INSERT INTO campaign_scores VALUES ({', '.join('?' * len(row))})", row)
    (stored,) = CampaignStore(path).stored_rows("mos1")
    assert stored == {**dict(zip(TRIAL_COLUMNS, row, strict=True)), "repeat_of": None, "answer": None}


def test_the_move_is_all_or_nothing(tmp_path):
    layout, campaign, _, legacy = legacy_campaign(tmp_path, rated=2)
    clash = (campaign.name, "ab", legacy[1]["entry_id"], 1, 0, 1, "asha", "x", "x", "test", "test", "x", None, None,
             3.0, None, None, None, None, "2026-01-01T11:00:00+00:00", None)
    with sqlite3.connect(layout.database) as con:  # a row already where the second pair's clip B would go
        con.executescript(TRIAL_SCHEMA)
        con.execute(f"INSERT INTO campaign_scores VALUES ({', '.join('?' * len(clash))})", clash)
    with pytest.raises(sqlite3.IntegrityError):
        CampaignStore(layout.database)
    assert "campaign_ratings" in tables(layout.database)  # nothing moved, nothing dropped, no column added
    with sqlite3.connect(layout.database) as con:
        assert con.execute("SELECT COUNT(*) FROM campaign_ratings").fetchone() == (2,)
        assert con.execute("SELECT COUNT(*) FROM campaign_scores").fetchone() == (1,)
        assert [r[1] for r in con.execute("PRAGMA table_info(campaign_scores)")] == list(TRIAL_COLUMNS)
