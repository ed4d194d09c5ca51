"""The SQLite rating store: validation, idempotent submissions, concurrency, exports.

Run: .venv/bin/python -m pytest tests/app/test_ratings.py -q
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from evaluation import indicemo, nova
from evaluation.report import read_jsonl
from webapp.ratings import (
    NOT_HEARD,
    ClipRating,
    RatingError,
    RatingStore,
    Submission,
    Trial,
    TrialClip,
    aggregate_exports,
    tag_request,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "nvv", "index", "words"),
    [
        ("That was so funny <laugh> I cannot stop", "laugh", 4, ["That", "was", "so", "funny", "I", "cannot", "stop"]),
        ("Well, <sigh> fine.", "sigh", 1, ["Well,", "fine."]),
        ("<chuckle> Okay then", "chuckle", 0, ["Okay", "then"]),
        ("नमस्ते — दोस्तों <laugh>", "laugh", 2, ["नमस्ते", "दोस्तों"]),
        ("tag glued<sigh>here", "sigh", 2, ["tag", "glued", "here"]),
    ],
)
def test_tag_request_matches_nova_positions(text, nvv, index, words):
    req = tag_request(text)
    assert (req.nvv, req.index, req.words) == (nvv, index, words)
    prompt = req.nova_prompt("p", text)
    verdict = nova.score_prompt(prompt, {"hyp_tags": [{"cls": nvv, "index": index}]})
    assert verdict["verdict_3class"] == "rendered" and verdict["requested_index"] == index


@pytest.mark.parametrize("text", ["no tags here", "two <laugh> tags <sigh>"])
def test_no_single_tag_no_request(text):
    assert tag_request(text) is None


def make_trial(store: RatingStore, trial_id: str, text: str, delivery: str | None, systems=("sysA", "sysB")) -> Trial:
    clips = [TrialClip(label, side, system, {"system": system, "seed": k}, k, f"hash-{trial_id}-{side}", "/dev/null")
             for k, (label, side, system) in enumerate(zip(("Clip 1", "Clip 2"), "BA", systems, strict=True))]
    trial = Trial(trial_id, f"p-{text[:8]}", text, delivery, clips)
    store.add_trial(trial)
    return trial


def rating(trial: Trial, rater: str, s1: int, s2: int, heard=(None, None), where=(None, None), pref="Clip 1"):
    return Submission(trial.trial_id, rater, pref,
                      [ClipRating("Clip 1", s1, heard[0], where[0]), ClipRating("Clip 2", s2, heard[1], where[1])])


def test_submission_is_validated_and_stored_once(tmp_path):
    store = RatingStore(tmp_path / "r.sqlite")
    trial = make_trial(store, "t1", "so funny <laugh> really", "Happy")
    with pytest.raises(RatingError, match="rater name"):
        store.submit(rating(trial, " ", 3, 4, ("laugh", NOT_HEARD), (2, None)))
    with pytest.raises(RatingError, match="expression score from 1 to 5"):
        store.submit(rating(trial, "asha", 6, 4, ("laugh", NOT_HEARD), (2, None)))
    with pytest.raises(RatingError, match="which sound you heard"):
        store.submit(rating(trial, "asha", 3, 4))
    with pytest.raises(RatingError, match="click the word"):
        store.submit(rating(trial, "asha", 3, 4, ("laugh", NOT_HEARD), (9, None)))
    with pytest.raises(RatingError, match="Generate a pair first"):
        store.submit(Submission("nope", "asha", "Clip 1", []))
    assert store.count_submissions() == 0
    sub = rating(trial, "asha", 3, 4, ("laugh", NOT_HEARD), (2, None))
    assert store.submit(sub) is True
    assert store.submit(rating(trial, "Asha ", 1, 1, ("sigh", "sigh"), (0, 0))) is False  # same rater: first wins
    rows = store.rows()
    assert len(rows) == 2 and {r["expression_score"] for r in rows} == {3, 4}
    row = next(r for r in rows if r["label"] == "Clip 1")
    assert row["rater"] == "asha" and row["audio_sha256"] == "hash-t1-B" and json.loads(row["settings"])["seed"] == 0
    assert row["preferred_system"] == "sysA" and row["submitted_at"]


def test_concurrent_raters_and_double_clicks_store_each_rating_once(tmp_path):
    store = RatingStore(tmp_path / "r.sqlite")
    trials = [make_trial(store, f"t{k}", f"prompt {k}", "Sad") for k in range(6)]
    acked: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def rater(name: str) -> None:
        barrier.wait()
        for trial in trials:
            for _ in range(2):  # double click
                sub = rating(trial, name, 2, 5)
                if RatingStore(tmp_path / "r.sqlite").submit(sub):
                    with lock:
                        acked.append(sub.key())

    threads = [threading.Thread(target=rater, args=(n,)) for n in ("asha", "ben", "asha", "ben")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    expected = sorted(f"t{k}:{n}" for k, n in itertools.product(range(6), ("asha", "ben")))
    assert sorted(acked) == expected  # exactly one acknowledgement per (trial, rater)
    assert store.submission_ids() == expected and len(store.rows()) == 2 * len(expected)


def _fill(store: RatingStore) -> None:
    """Three raters, two systems, four deliveries, tagged and untagged prompts."""
    texts = [("Oh that is hilarious <laugh> stop it", "Happy"), ("I lost again <sigh> never mind", "Sad"),
             ("Get out of my room now", "Angry"), ("We won the match <chuckle> amazing", "Excited"),
             ("Please submit the form today", "Professional"), ("Nothing to do with emotions", None)]
    scores = itertools.cycle([(4, 2), (3, 3), (5, 1), (2, 4), (1, 5), (3, 2)])
    heard = itertools.cycle([(("laugh", NOT_HEARD), (2, None)), (("sigh", "chuckle"), (4, -1)),
                             (("chuckle", "laugh"), (2, 2)), ((NOT_HEARD, NOT_HEARD), (None, None))])
    for k, (text, delivery) in enumerate(texts):
        trial = make_trial(store, f"t{k}", text, delivery,
                           systems=("rumik", "espeak") if k % 2 else ("espeak", "rumik"))
        tagged = tag_request(text) is not None
        for rater in ("asha", "ben", "chen"):
            s1, s2 = next(scores)
            h, w = next(heard) if tagged else ((None, None), (None, None))
            store.submit(rating(trial, rater, s1, s2, h, w, pref="Clip 2" if s2 > s1 else "Clip 1"))


def test_export_reaggregates_to_the_results_view(tmp_path):
    store = RatingStore(tmp_path / "r.sqlite")
    _fill(store)
    md, numbers = store.results()
    files = store.export(tmp_path / "export")
    bundle = files[0]
    out = tmp_path / "unzipped"
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(out)
    judgments = read_jsonl(out / "indicemo_judgments.jsonl")
    assert set(judgments[0]) == {"prompt_id", "judge_id", "system_id", "expression_quality_score", "target_delivery"}
    emo = indicemo.aggregate(judgments)
    assert {s.system: s.all_five for s in emo.systems} == {k: v["all_five"] for k, v in numbers["indicemo"].items()}
    assert emo.markdown() in md
    # The command line on the exported file prints the same table as the results view.
    cli = subprocess.run([sys.executable, "-m", "evaluation.indicemo", "aggregate", "--judgments",
                          str(out / "indicemo_judgments.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout.strip() == emo.markdown().strip()
    # NoVA: score each exported transcripts file against the exported prompts, aggregate per system.
    manifest = json.loads((out / "manifest.json").read_text())
    prompts = read_jsonl(out / "nova_prompts.jsonl")
    assert prompts and all(set(p) == {"id", "text", "text_with_mark", "nvv", "requested_index", "n_words"}
                           for p in prompts)
    by_system: dict[str, dict[str, list]] = {}
    for entry in manifest["nova_transcripts"]:
        lines = read_jsonl(out / entry["path"])
        assert all(set(line) == {"id", "hyp_tags"} for line in lines)
        ids = {line["id"] for line in lines}
        verdicts = nova.score_records([p for p in prompts if p["id"] in ids], lines)
        by_system.setdefault(entry["system"], {}).setdefault(entry["listener"], []).append(verdicts)
    assert set(by_system) == set(numbers["nova"]) == {"rumik", "espeak"}
    for system, listeners in by_system.items():
        agg = nova.aggregate(system, listeners)
        assert agg.score == pytest.approx(numbers["nova"][system]["score"])
        assert agg.markdown() in md
    # Independent check of one number: aggregate_exports on the raw records agrees too.
    assert aggregate_exports(judgments, *store.nova_sets())[1]["indicemo"] == numbers["indicemo"]


def test_shipped_nova_prompts_get_their_own_positions():
    prompts = read_jsonl(ROOT / "evaluation" / "prompts" / "nova_tags_en.jsonl")
    assert prompts
    for p in prompts:
        req = tag_request(p["text_with_mark"])
        assert (req.nvv, req.index, len(req.words)) == (p["nvv"], p["requested_index"], p["n_words"]), p["id"]
