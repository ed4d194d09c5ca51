"""Tests for webapp/campaign/analysis/formats.py: the P.808 toolkit's and webMUSHRA's CSV layouts, and our
SMOS file, on small hand-made rating rows.

The expected headers are typed out from the reference tools' sources:
- microsoft/P.808 `src/result_parser.py` (the columns it reads, after `data_cleaning` lower-cases
  the header), `src/create_input.py` (the HIT inputs Q<j>, Q<j>_P/Q<j>_R, TP, TP_ANS, gold_clips,
  gold_clips_ans) and `src/P808Template/ACR_template.html` / `CCR_template.html` (the form fields
  Q<i>_URL, Q<i>_order, q<i>, audio_n_play_<id>, audio_n_finish_<id>, with ids q<i> / q_<i>);
- audiolabs/webMUSHRA `service/write.php` (mushra.csv) and `lib/webmushra/audio/MushraAudioControl.js`
  (the stimulus names "reference" and "anchor35").

Run: python -m pytest -n0 tests/app/test_campaign_formats.py -q
"""

from __future__ import annotations

import configparser
import csv
import uuid
from pathlib import Path

import pytest

from webapp.campaign.analysis.formats import FormatError, session_uuid, write_p808, write_smos, write_webmushra


def row(design, slot, rater, position, item, kind, condition, clip, score, stimulus=0, **extra) -> dict:
    prompt = item.split("/")[1] if kind == "gold" else item.split("/")[0]
    base = {"campaign": "demo", "design": design, "entry_id": f"e{slot}-{position}", "stimulus": stimulus,
            "slot": slot, "position": position, "rater": rater, "item_id": item, "prompt_id": prompt,
            "kind": kind, "role": "test" if kind == "test" else kind, "condition": condition, "reference": None,
            "clip_id": clip, "score": float(score), "raw_score": None, "side": None, "expected": None,
            "shown_at": f"2026-03-01T10:{position:02d}:00+00:00",
            "submitted_at": f"2026-03-01T10:{position:02d}:20+00:00", "seconds": 20.0}
    base.update(extra)
    return base


def mos_rows() -> list[dict]:
    """Two raters, 4 trials each (2 tests, a trap, a gold); a third rater stopped after 2 trials."""
    rows = []
    for slot, rater in ((0, "alice"), (1, "crowd-0123456789ab")):
        rows += [row("mos", slot, rater, 0, "p1/sysA", "test", "sysA", "a1", 4),
                 row("mos", slot, rater, 1, "trap/3", "trap", "trap", "tp3", 3, role="trap", expected=3.0),
                 row("mos", slot, rater, 2, "p1/sysB", "test", "sysB", "b1", 2),
                 row("mos", slot, rater, 3, "gold/p1/gold:degraded", "gold", "gold:degraded", "g1", 1, expected=1.0)]
    rows += [row("mos", 2, "carol", 0, "p2/sysA", "test", "sysA", "a2", 5),
             row("mos", 2, "carol", 1, "p2/sysB", "test", "sysB", "b2", 3)]
    return rows[::-1]  # the export sorts


def read(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [dict(zip(header, r, strict=True)) for r in reader]


def urls(clip_id: str) -> str:
    return f"https://cdn.example/{clip_id}.wav"


ACR_META = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "AcceptTime", "SubmitTime"]
STATS_AND_REVIEW = ["Answer.2_birth_year", "Answer.Math", "Answer.t1", "Approve", "Reject"]


def p808_lookups(method: str, n_questions: int) -> list[str]:
    """Excerpt of microsoft/P.808 src/result_parser.py: the row keys data_cleaning(), check_audio_played(),
    check_tps(), check_gold_question(), check_variance() and transform() look up, with the acr/dcr_ccr
    parser-config values (src/assets_master_script/*_result_parser_template.cfg)."""
    keys = ["workerid", "hitid", "assignmentid", "assignmentstatus", "input.tp"]  # data_cleaning, [trapping]
    for i in range(1, n_questions + 1):
        keys += [f"answer.q{i}_url", f"answer.q{i}"]  # check_tps / transform
        keys.append(f"answer.audio_n_finish_q{i}" if method == "acr" else f"answer.audio_n_finish_q_{i}")
    if method == "acr":
        keys += ["input.tp_ans", "input.gold_clips", "input.gold_clips_ans"]  # [trapping] ans, [gold_question]
    return keys


def normalised(header: list[str]) -> list[str]:
    """data_cleaning(): `[field.strip().lower().replace('_slide','') for field in reader.fieldnames]`."""
    return [name.strip().lower().replace("_slide", "") for name in header]


# ------------------------------------------------------------------ P.808 ACR (mos)

def test_acr_batch_header_is_the_toolkits(tmp_path):
    paths = write_p808("acr", mos_rows(), tmp_path, clip_urls=urls, design="mos")
    assert [p.name for p in paths] == ["p808_acr_2q_batch_results.csv", "p808_acr_2q_result_parser.cfg",
                                       "p808_acr_4q_batch_results.csv", "p808_acr_4q_result_parser.cfg"]
    header, _ = read(tmp_path / "p808_acr_4q_batch_results.csv")
    questions = [c for i in range(1, 5) for c in (f"Answer.Q{i}_URL", f"Answer.audio_n_finish_q{i}",
                                                  f"Answer.audio_n_play_q{i}", f"Answer.q{i}")]
    assert header == [*ACR_META, "Input.Q0", "Input.Q1", "Input.TP", "Input.TP_ANS", "Input.gold_clips",
                      "Input.gold_clips_ans", "Input.gold_clips_2", *questions, *STATS_AND_REVIEW]
    assert set(p808_lookups("acr", 4)) <= set(normalised(header))


def test_acr_values_land_in_their_cells(tmp_path):
    write_p808("acr", mos_rows(), tmp_path, clip_urls=urls, design="mos")
    _, hits = read(tmp_path / "p808_acr_4q_batch_results.csv")
    assert [h["WorkerId"] for h in hits] == ["alice", "crowd-0123456789ab"]
    alice = hits[0]
    assert alice["HITId"] == "demo/slot-0" and alice["AssignmentId"] == "demo/slot-0/alice"
    assert alice["AssignmentStatus"] == "Submitted"
    assert (alice["AcceptTime"], alice["SubmitTime"]) == ("2026-03-01T10:00:00+00:00", "2026-03-01T10:03:20+00:00")
    assert (alice["Input.Q0"], alice["Input.Q1"]) == (urls("a1"), urls("b1"))
    assert (alice["Input.TP"], alice["Input.TP_ANS"]) == (urls("tp3"), "3")
    gold = (alice["Input.gold_clips"], alice["Input.gold_clips_ans"], alice["Input.gold_clips_2"])
    assert gold == (urls("g1"), "1", "")
    assert [alice[f"Answer.Q{i}_URL"] for i in range(1, 5)] == [urls(c) for c in ("a1", "tp3", "b1", "g1")]
    assert [alice[f"Answer.q{i}"] for i in range(1, 5)] == ["4", "3", "2", "1"]  # integers: the parser int()s them
    assert {alice[f"Answer.audio_n_finish_q{i}"] for i in range(1, 5)} == {"1"}
    assert alice["Answer.Math"] == alice["Answer.2_birth_year"] == ""


def test_acr_short_session_gets_its_own_batch_and_config(tmp_path):
    write_p808("acr", mos_rows(), tmp_path, design="mos")  # default URLs: the campaign folder's clips/<id>.wav
    header, hits = read(tmp_path / "p808_acr_2q_batch_results.csv")
    assert [h["WorkerId"] for h in hits] == ["carol"]
    assert hits[0]["Answer.Q1_URL"] == "clips/a2.wav" and hits[0]["Answer.q2"] == "3"
    assert hits[0]["Input.TP"] == hits[0]["Input.gold_clips"] == ""
    cfg = configparser.ConfigParser()
    cfg.read(tmp_path / "p808_acr_2q_result_parser.cfg")
    assert cfg["general"]["number_of_questions_in_rating"] == "2"
    assert cfg["acceptance_criteria"]["correct_tps_bigger_equal"] == "0"  # carol had no trap
    cfg.read(tmp_path / "p808_acr_4q_result_parser.cfg")
    assert cfg["general"]["number_of_questions_in_rating"] == "4"
    assert cfg["acceptance_criteria"]["correct_tps_bigger_equal"] == "1"
    assert cfg["trapping"]["url_found_in"] == "input.tp" and cfg["trapping"]["ans_found_in"] == "input.tp_ans"
    assert cfg["gold_question"]["url_found_in"] == "input.gold_clips"
    assert cfg["accept_and_use"]["gold_standard_bigger_equal"] == "1"


# ------------------------------------------------------------------ P.808 CCR (cmos)

def cmos_rows() -> list[dict]:
    return [row("cmos", 0, "dan", 0, "p1/sysA~ref", "test", "sysA", "a1", 2, reference="ref", side="A",
                raw_score=-2.0),
            row("cmos", 0, "dan", 1, "p2/sysA~ref", "test", "sysA", "a2", -1, reference="ref", side="B",
                raw_score=-1.0)]


def test_ccr_batch_header_and_values(tmp_path):
    paths = write_p808("ccr", cmos_rows(), tmp_path, clip_urls=urls, design="cmos",
                                 clip_ids_by_key={"p1|ref": "r1", "p2|ref": "r2"})
    assert [p.name for p in paths] == ["p808_ccr_2q_batch_results.csv", "p808_ccr_2q_result_parser.cfg"]
    header, hits = read(paths[0])
    questions = [c for i in (1, 2) for c in (f"Answer.Q{i}_URL", f"Answer.Q{i}_order", f"Answer.audio_n_finish_q_{i}",
                                             f"Answer.audio_n_play_q_{i}", f"Answer.q{i}")]
    assert header == [*ACR_META, "Input.Q0_P", "Input.Q0_R", "Input.Q1_P", "Input.Q1_R", "Input.TP", *questions,
                      *STATS_AND_REVIEW]
    assert set(p808_lookups("ccr", 2)) <= set(normalised(header))
    (dan,) = hits
    assert (dan["Input.Q0_P"], dan["Input.Q0_R"], dan["Input.Q1_R"]) == (urls("a1"), urls("r1"), urls("r2"))
    # Q<i>_URL is the processed (test) clip; q<i> the processed-vs-reference answer (the toolkit's sign-corrected
    # value); order "pr" = processed played first (our side A), "rp" = reference first
    assert (dan["Answer.Q1_URL"], dan["Answer.Q1_order"], dan["Answer.q1"]) == (urls("a1"), "pr", "2")
    assert (dan["Answer.Q2_URL"], dan["Answer.Q2_order"], dan["Answer.q2"]) == (urls("a2"), "rp", "-1")
    cfg = configparser.ConfigParser()
    cfg.read(paths[1])
    assert cfg["general"]["number_of_questions_in_rating"] == "2"
    assert cfg["acceptance_criteria"]["correct_tps_bigger_equal"] == "0"  # no trapping clips in cmos
    assert "gold_question" in cfg  # transform() reads the section for every method


def test_ccr_reference_urls_are_blank_without_the_clip_index(tmp_path):
    (path, _) = write_p808("ccr", cmos_rows(), tmp_path, design="cmos")
    _, hits = read(path)
    assert hits[0]["Input.Q0_P"] == "clips/a1.wav" and hits[0]["Input.Q0_R"] == ""


# ------------------------------------------------------------------ webMUSHRA (mushra)

def test_webmushra_csv(tmp_path):
    conds = ["sysB", "reference", "anchor", "sysA"]
    scores = [55, 100, 12, 71]
    rows = [row("mushra", 3, "erin", 0, "p7", "test", c, f"clip{s}", sc, stimulus=s, seconds=41.25,
                role={"reference": "reference", "anchor": "anchor"}.get(c, "test"))
            for s, (c, sc) in enumerate(zip(conds, scores, strict=True))]
    (path,) = write_webmushra(rows[::-1], tmp_path, design="mushra")
    assert path.name == "webmushra_mushra.csv"
    header, out = read(path)
    assert header == ["session_test_id", "rater", "session_uuid", "trial_id", "rating_stimulus", "rating_score",
                      "rating_time", "rating_comment"]
    assert [r["rating_stimulus"] for r in out] == ["sysB", "reference", "anchor35", "sysA"]  # play order
    assert [r["rating_score"] for r in out] == ["55", "100", "12", "71"]
    assert {r["trial_id"] for r in out} == {"p7"} and {r["session_test_id"] for r in out} == {"demo"}
    assert {r["rating_time"] for r in out} == {"41250"}  # milliseconds on the page, as webMUSHRA stores it
    assert {r["rating_comment"] for r in out} == {""}
    sid = out[0]["session_uuid"]
    assert uuid.UUID(sid) and sid == session_uuid("demo", 3, "erin") != session_uuid("demo", 4, "erin")


# ------------------------------------------------------------------ SMOS (our own layout)

def test_smos_csv(tmp_path):
    rows = [row("smos", 0, "fay", 0, "p1/sysA", "test", "sysA", "a1", 4, reference="spk"),
            row("smos", 0, "fay", 1, "trap/2", "trap", "trap", "tp2", 2, reference="spk", expected=2.0)]
    (path,) = write_smos(rows, tmp_path, clip_urls=urls, design="smos")
    header, out = read(path)
    assert header == ["campaign", "rater", "slot", "position", "entry_id", "item_id", "prompt_id", "kind", "condition",
                      "clip_url", "reference_url", "score", "expected", "seconds", "shown_at", "submitted_at"]
    assert (out[0]["clip_url"], out[0]["reference_url"], out[0]["score"], out[0]["expected"]) == (
        urls("a1"), urls("spk"), "4", "")
    assert (out[1]["kind"], out[1]["expected"]) == ("trap", "2")


# ------------------------------------------------------------------ contract

def test_nothing_rated_writes_nothing(tmp_path):
    assert write_p808("acr", [], tmp_path) == [] and write_webmushra([], tmp_path) == [] == write_smos([], tmp_path)
    assert not any(tmp_path.iterdir())


def test_bad_calls_name_the_fix(tmp_path):
    with pytest.raises(FormatError, match="P.808 method 'ab': use 'acr' \\(absolute ratings\\) or 'ccr'"):
        write_p808("ab", [], tmp_path)
    with pytest.raises(FormatError, match="pass one campaign's rows"):
        write_p808("acr", cmos_rows(), tmp_path, design="mos")
    with pytest.raises(FormatError, match="pass one campaign's rows"):
        write_smos(mos_rows() + cmos_rows(), tmp_path)
    with pytest.raises(FormatError, match="add it to clip_urls"):
        write_p808("acr", mos_rows(), tmp_path, clip_urls={"a1": "x.wav"})
