"""SQLite store of blind A/B ratings from the app's Compare & rate tab, and its exports.

Library module (no command line)::

    store = RatingStore("outputs/app/ratings.sqlite")
    store.add_trial(trial)                       # when a pair is generated
    store.check(submission)                      # RatingError naming the fix; nothing stored
    stored = store.submit(submission)            # False: that submission id was already stored
    store.discard_unrated(trial_ids)             # pairs pruned unrated (webapp.storage.PendingClips)
    store.export("outputs/app/export")           # IndicEmo judgments + NoVA prompts/transcripts
    md, numbers = store.results()                # aggregated with evaluation.indicemo / .nova

Durability: `rumik_app.sqlite.SQLiteStore`'s rules (WAL, `synchronous=FULL`, a fresh connection
per call), one `BEGIN IMMEDIATE` transaction per submission. A submission
is acknowledged only after COMMIT returns, so a server killed afterwards loses nothing
acknowledged. The submission id is the primary key: a double click stores once.

Export formats:
- IndicEmo judgments (`evaluation.indicemo`): `prompt_id, judge_id, system_id,
  expression_quality_score, target_delivery` per rated clip of a trial with a target delivery.
- NoVA (`evaluation.nova`): `nova_prompts.jsonl` (`id, text, text_with_mark, nvv,
  requested_index, n_words`) and per system, listener (rater) and run a transcripts file of
  verifier-style lines `{"id", "hyp_tags": [{"cls", "index"}]}` (index -1 = heard, position
  unsure; an empty list = not heard). The k-th rating of a prompt by one rater for one
  system is run k. `manifest.json` says which file is which.
"""

from __future__ import annotations

import json
import zipfile
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from evaluation import indicemo, nova
from evaluation.report import markdown_table, write_csv, write_jsonl
from rumik_app.errors import RumikError
from rumik_app.sqlite import SQLiteStore
from webapp.common import safe_file_name

SCHEMA_VERSION = 1
NO_PREFERENCE = "none"
NOT_HEARD = "none"
UNSURE_INDEX = nova.UNKNOWN_INDEX
SCORES = (1, 2, 3, 4, 5)

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    trial_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    text TEXT NOT NULL,
    target_delivery TEXT,
    clips TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    submission_id TEXT PRIMARY KEY,
    trial_id TEXT NOT NULL REFERENCES trials(trial_id),
    rater TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    preference TEXT NOT NULL,
    preferred_system TEXT,
    comment TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS clip_ratings (
    submission_id TEXT NOT NULL REFERENCES submissions(submission_id),
    label TEXT NOT NULL,
    side TEXT NOT NULL,
    system_id TEXT NOT NULL,
    settings TEXT NOT NULL,
    seed INTEGER,
    audio_sha256 TEXT NOT NULL,
    expression_score INTEGER NOT NULL CHECK (expression_score BETWEEN 1 AND 5),
    heard_cls TEXT,
    heard_index INTEGER,
    PRIMARY KEY (submission_id, label)
);
"""


class RatingError(RumikError, ValueError):
    """A submission that cannot be stored as given; the message says what to fix."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class TrialClip:
    """One side of a trial, as generated: shown to the rater under `label` only."""

    label: str  # blind label, e.g. "Clip 1"
    side: str  # "A" or "B" (the settings column it came from)
    system_id: str  # the id used in exports (system plus distinguishing settings)
    settings: dict  # full request settings, system and model included
    seed: int | None
    audio_sha256: str
    audio_path: str


@dataclass
class Trial:
    trial_id: str
    prompt_id: str
    text: str  # what was synthesised, inline tags included
    target_delivery: str | None
    clips: list[TrialClip]
    created_at: str = field(default_factory=now_iso)

    @property
    def request(self) -> TagRequest | None:
        return tag_request(self.text)


@dataclass(frozen=True)
class TagRequest:
    """The one inline tag of a prompt as a NoVA request: class, position, the words."""

    nvv: str
    index: int  # words before the tag (NoVA's requested_index)
    words: list[str]  # the request's words as shown to the rater

    def nova_prompt(self, prompt_id: str, text_with_mark: str) -> dict:
        return {"id": prompt_id, "text": " ".join(self.words), "text_with_mark": text_with_mark, "nvv": self.nvv,
                "requested_index": self.index, "n_words": len(self.words)}


def tag_request(text: str) -> TagRequest | None:
    """NoVA request of a text holding exactly one inline tag (tokenised as `evaluation.nova` does)."""
    tokens = nova.tokenize(text, nova.load_spellings())
    tags = [k for k, t in enumerate(tokens) if t[0] == "t"]
    if len(tags) != 1:
        return None
    shown = [piece for piece in nova.TAG_SPAN.sub(" ", text).split() if nova.NOT_WORD_CHAR.sub("", piece.lower())]
    words = [t[1] for t in tokens if t[0] == "w"]
    if len(shown) == len(words):
        words = shown
    return TagRequest(tokens[tags[0]][1], sum(t[0] == "w" for t in tokens[: tags[0]]), words)


@dataclass
class ClipRating:
    label: str
    expression_score: int
    heard_cls: str | None = None  # laugh/chuckle/sigh, NOT_HEARD, or None (no tag asked)
    heard_index: int | None = None  # words before the heard sound; -1 = unsure where


@dataclass
class Submission:
    trial_id: str
    rater: str
    preference: str  # a blind label or NO_PREFERENCE
    ratings: list[ClipRating]
    comment: str = ""
    submission_id: str = ""  # default: trial id + rater, so one rating per rater and trial

    def key(self) -> str:
        return self.submission_id or f"{self.trial_id}:{self.rater.strip().casefold()}"


class RatingStore(SQLiteStore):
    """The ratings database (created on first use)."""

    SCHEMA = SCHEMA
    SCHEMA_VERSION = SCHEMA_VERSION

    # ------------------------------------------------------------------ writes
    def add_trial(self, trial: Trial) -> None:
        clips = json.dumps([asdict(c) for c in trial.clips], ensure_ascii=False)
        with self._transaction() as con:
            con.execute("INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?)",
                        (trial.trial_id, trial.created_at, trial.prompt_id, trial.text, trial.target_delivery, clips))

    def get_trial(self, trial_id: str) -> Trial | None:
        with self._connect() as con:
            row = con.execute("SELECT trial_id, prompt_id, text, target_delivery, clips, created_at FROM trials "
                              "WHERE trial_id = ?", (trial_id,)).fetchone()
        if row is None:
            return None
        return Trial(row[0], row[1], row[2], row[3], [TrialClip(**c) for c in json.loads(row[4])], row[5])

    def discard_unrated(self, trial_ids: list[str]) -> int:
        """Delete trials that no submission rates (pairs whose clips were pruned unrated);
        returns how many were deleted. A rated trial is never deleted."""
        if not trial_ids:
            return 0
        with self._transaction() as con:
            return sum(con.execute("DELETE FROM trials WHERE trial_id = ? AND NOT EXISTS "
                                   "(SELECT 1 FROM submissions WHERE submissions.trial_id = ?)", (t, t)).rowcount
                       for t in trial_ids)

    def check(self, sub: Submission) -> Trial:
        """The trial `sub` rates, with the submission checked as `submit` checks it (RatingError
        naming the fix); nothing is stored."""
        if not sub.rater.strip():
            raise RatingError("Enter your rater name before submitting.")
        trial = self.get_trial(sub.trial_id)
        if trial is None:
            raise RatingError("No generated pair to rate (or it is unknown to this server). Generate a pair first.")
        _check_ratings(trial, {c.label: c for c in trial.clips}, {r.label: r for r in sub.ratings}, sub.preference)
        return trial

    def submit(self, sub: Submission) -> bool:
        """Store one submission in one transaction; False if its id was already stored."""
        rater = sub.rater.strip()
        trial = self.check(sub)
        clips = {c.label: c for c in trial.clips}
        rated = {r.label: r for r in sub.ratings}
        preferred = clips[sub.preference].system_id if sub.preference in clips else None
        with self._transaction() as con:
            if con.execute("SELECT 1 FROM submissions WHERE submission_id = ?", (sub.key(),)).fetchone():
                return False
            con.execute("INSERT INTO submissions VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (sub.key(), trial.trial_id, rater, now_iso(), sub.preference, preferred, sub.comment or ""))
            for label, clip in clips.items():
                r = rated[label]
                con.execute("INSERT INTO clip_ratings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (sub.key(), label, clip.side, clip.system_id, json.dumps(clip.settings, ensure_ascii=False),
                             clip.seed, clip.audio_sha256, int(r.expression_score), r.heard_cls, r.heard_index))
        return True

    # ------------------------------------------------------------------ reads
    def rows(self) -> list[dict]:
        """One dict per rated clip, in submission order (the raw export)."""
        query = """
            SELECT s.submission_id, s.rater, s.submitted_at, s.trial_id, t.prompt_id, t.text, t.target_delivery,
                   c.label, c.side, c.system_id, c.settings, c.seed, c.audio_sha256, c.expression_score,
                   c.heard_cls, c.heard_index, s.preference, s.preferred_system, s.comment
            FROM submissions s JOIN trials t USING (trial_id) JOIN clip_ratings c USING (submission_id)
            ORDER BY s.submitted_at, s.submission_id, c.label"""
        with self._connect() as con:
            cur = con.execute(query)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def count_submissions(self) -> int:
        with self._connect() as con:
            return con.execute("SELECT COUNT(*) FROM submissions").fetchone()[0]

    def submission_ids(self) -> list[str]:
        with self._connect() as con:
            return [r[0] for r in con.execute("SELECT submission_id FROM submissions ORDER BY submission_id")]

    # ------------------------------------------------------------------ exports
    def indicemo_judgments(self) -> list[dict]:
        return [{"prompt_id": r["prompt_id"], "judge_id": r["rater"], "system_id": r["system_id"],
                 "expression_quality_score": r["expression_score"], "target_delivery": r["target_delivery"]}
                for r in self.rows() if r["target_delivery"]]

    def nova_sets(self) -> tuple[list[dict], dict[str, dict[str, list[list[dict]]]]]:
        """(NoVA prompts, {system_id: {rater: [run transcripts, ...]}})."""
        prompts: dict[str, dict] = {}
        runs: dict[str, dict[str, list[list[dict]]]] = defaultdict(lambda: defaultdict(list))
        for r in self.rows():
            req = tag_request(r["text"])
            if req is None or r["heard_cls"] is None:
                continue
            prompts.setdefault(r["prompt_id"], req.nova_prompt(r["prompt_id"], r["text"]))
            tags = [] if r["heard_cls"] == NOT_HEARD else [{"cls": r["heard_cls"], "index": r["heard_index"]}]
            by_run = runs[r["system_id"]][r["rater"]]
            run = next((k for k, lines in enumerate(by_run) if all(x["id"] != r["prompt_id"] for x in lines)), None)
            if run is None:
                by_run.append([])
                run = len(by_run) - 1
            by_run[run].append({"id": r["prompt_id"], "hyp_tags": tags})
        return list(prompts.values()), {s: dict(v) for s, v in runs.items()}

    def export(self, out_dir: str | Path) -> list[Path]:
        """Write every export file (and a zip of them) under `out_dir`; returns the paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        files = [write_jsonl(out / "indicemo_judgments.jsonl", self.indicemo_judgments())]
        prompts, runs = self.nova_sets()
        files.append(write_jsonl(out / "nova_prompts.jsonl", prompts))
        manifest: dict = {"created_at": now_iso(), "submissions": self.count_submissions(), "nova_transcripts": []}
        for system, raters in sorted(runs.items()):
            for rater, rater_runs in sorted(raters.items()):
                for k, lines in enumerate(rater_runs, 1):
                    path = out / "nova_transcripts" / safe_file_name(system) / f"{safe_file_name(rater)}_run{k}.jsonl"
                    files.append(write_jsonl(path, lines))
                    manifest["nova_transcripts"].append(
                        {"system": system, "listener": rater, "run": k, "path": str(path.relative_to(out))})
        headers = list(rows[0]) if rows else ["submission_id"]
        files.append(write_csv(out / "ratings.csv", headers, [list(r.values()) for r in rows]))
        (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1), encoding="utf-8")
        files.append(out / "manifest.json")
        bundle = out / "ratings_export.zip"
        with zipfile.ZipFile(bundle, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in files:
                zf.write(f, f.relative_to(out))
        return [bundle, *files]

    def results(self) -> tuple[str, dict]:
        """(markdown report, numbers) aggregated exactly as the exports would be."""
        return aggregate_exports(self.indicemo_judgments(), *self.nova_sets(), preferences=self._preferences())

    def _preferences(self) -> dict[str, int]:
        with self._connect() as con:
            rows = con.execute("SELECT COALESCE(preferred_system, 'no preference'), COUNT(*) FROM submissions "
                               "GROUP BY 1 ORDER BY 2 DESC").fetchall()
        return dict(rows)


def _check_ratings(trial: Trial, clips: dict[str, TrialClip], rated: dict[str, ClipRating], preference: str) -> None:
    if set(rated) != set(clips):
        raise RatingError(f"Rate every clip ({', '.join(clips)}) once.")
    for label, r in rated.items():
        if r.expression_score not in SCORES:
            raise RatingError(f"Give {label} an expression score from 1 to 5.")
    if preference not in (*clips, NO_PREFERENCE):
        raise RatingError(f"Choose a preference: {', '.join(clips)} or no preference.")
    req = trial.request
    for label, r in rated.items():
        if req is None:
            r.heard_cls = r.heard_index = None
            continue
        if r.heard_cls not in (*nova.CLASSES, NOT_HEARD):
            raise RatingError(f"For {label}: say which sound you heard (or 'not heard').")
        if r.heard_cls == NOT_HEARD:
            r.heard_index = None
        elif r.heard_index is None or not UNSURE_INDEX <= int(r.heard_index) <= len(req.words):
            raise RatingError(f"For {label}: click the word the sound came just before (or 'unsure where').")
        else:
            r.heard_index = int(r.heard_index)


def aggregate_exports(judgments: list[dict], prompts: list[dict], runs: dict[str, dict[str, list[list[dict]]]],
                      preferences: dict[str, int] | None = None) -> tuple[str, dict]:
    """Aggregate exported records with `evaluation.indicemo` and `evaluation.nova`.

    Returns (markdown, numbers): numbers = {"indicemo": {system: {...}}, "nova": {system: {...}}}.
    """
    numbers: dict = {"indicemo": {}, "nova": {}, "preferences": preferences or {}}
    parts = []
    if judgments:
        try:
            emo = indicemo.aggregate(judgments)
            parts.append(emo.markdown())
            numbers["indicemo"] = {s.system: {"all_five": s.all_five, "four_emotions": s.four_emotions,
                                              "mean_rank": s.mean_rank, "win_rate": s.win_rate, **s.per_delivery}
                                   for s in emo.systems}
        except ValueError as exc:
            parts.append(f"## IndicEmo\n\nCannot aggregate: {exc}")
    else:
        parts.append("## IndicEmo\n\nNo ratings of prompts with a target delivery yet.")
    by_id = {p["id"]: p for p in prompts}
    for system, raters in sorted(runs.items()):
        listeners = {rater: [nova.score_records([by_id[x["id"]] for x in run], run) for run in rater_runs]
                     for rater, rater_runs in raters.items()}
        agg = nova.aggregate(system, listeners)
        parts.append(agg.markdown())
        numbers["nova"][system] = {"score": agg.score, **{x.listener: {"laughter": x.laughter, "sigh": x.sigh, "S": x.s}
                                                          for x in agg.listeners}}
    if not runs:
        parts.append("## NoVA\n\nNo ratings of tagged prompts yet.")
    if preferences:
        parts.append("## Preferences\n\n" + markdown_table(["preferred", "submissions"], list(preferences.items())))
    return "\n\n".join(parts), numbers
