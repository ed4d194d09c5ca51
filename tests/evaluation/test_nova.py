"""Tests for evaluation.nova: one hand-made case per docs/ARCHITECTURE.md §8 rule, aggregation, CLI round trip.

Run: .venv/bin/python -m pytest tests/evaluation/test_nova.py -q
"""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.nova import (
    aggregate,
    load_spellings,
    main,
    score_prompt,
    score_records,
    tokenize,
)

REPO = Path(__file__).resolve().parents[2]
# Request words: i was like | there -> the laugh is requested at position 3.
PROMPT = {
    "id": "p1",
    "text": "I was, like, there.",
    "text_with_mark": "I was, like, <laugh> there.",
    "nvv": "laugh",
    "requested_index": 3,
    "n_words": 4,
}


def judge(hyp, prompt=PROMPT, **kw):
    return score_prompt(prompt, {"id": prompt["id"], "hyp": hyp}, **kw)


def verdicts(out):
    return out["verdict_3class"], out["verdict_2class"], out["spurious_3class"], out["spurious_2class"]


def test_tokens_tags_single_punctuation_stripped_empty_dropped():
    spellings = load_spellings()
    assert tokenize("I was, like <chuckle>, THERE! — ok[laughs].", spellings) == [
        ("w", "i"),
        ("w", "was"),
        ("w", "like"),
        ("t", "chuckle"),
        ("w", "there"),
        ("w", "ok"),
        ("t", "laugh"),
    ]
    # Unknown bracket spans are dropped; parentheses that are not spellings stay words.
    assert tokenize("a [music] (b) (Sighs) <foo> c", spellings) == [("w", "a"), ("w", "b"), ("t", "sigh"), ("w", "c")]


def test_punctuation_on_either_side_of_tag():
    out = judge("I was like, [laughs]. There!")
    assert verdicts(out) == ("rendered", "rendered", 0, 0)
    assert out["requested_index"] == 3 and out["coverage"] == 1.0
    assert out["hyp_tags"] == [{"cls": "laugh", "index": 3}]


def test_requested_position_recomputed_from_text_with_mark():
    # "—" is not a word once non-alphanumerics are removed: 2 words precede the tag.
    prompt = {**PROMPT, "text_with_mark": "Wait — what <laugh> really", "requested_index": 3}
    assert judge("wait what [laughs] really", prompt)["requested_index"] == 2
    assert judge("wait what [laughs] really", prompt)["verdict_3class"] == "rendered"


def test_dropped_transcript_word_does_not_move_position():
    # "was" missing: alignment deletes the request word, the tag still follows 3 request words.
    out = judge("I like [laughs] there")
    assert verdicts(out) == ("rendered", "rendered", 0, 0)
    assert out["coverage"] == 0.75


def test_added_transcript_word_does_not_move_position():
    out = judge("so I was um like [laughs] there")
    assert verdicts(out) == ("rendered", "rendered", 0, 0)
    assert out["hyp_tags"] == [{"cls": "laugh", "index": 3}]


def test_one_word_late_is_misplaced():
    # Moving a tag (0.9 + 0.9) is cheaper than shifting words (1.0 + 1.0).
    out = judge("I was like there [laughs]")
    assert verdicts(out) == ("misplaced", "misplaced", 0, 0)
    assert out["hyp_tags"] == [{"cls": "laugh", "index": 4}]
    early = judge("I [laughs] was like there")
    assert early["hyp_tags"] == [{"cls": "laugh", "index": 1}]


def test_wrong_class_wins_slot_over_misplaced_right_class():
    out = judge("I was like [chuckles] there [laughs]")
    # 3-class: chuckle at the slot -> wrong_class (consumed); the laugh at 4 is unrequested.
    # 2-class: chuckle is laughter -> rendered (consumed); the laugh is still unrequested.
    assert verdicts(out) == ("wrong_class", "rendered", 1, 1)
    sigh = judge("I was like [sighs] there [laughs]")
    assert verdicts(sigh) == ("wrong_class", "wrong_class", 1, 1)


def test_duplicate_tag_counts_once_rendered_once_unrequested():
    out = judge("I was like [laughs] [laughs] there")
    assert verdicts(out) == ("rendered", "rendered", 1, 1)
    assert out["hyp_tags"] == [{"cls": "laugh", "index": 3}, {"cls": "laugh", "index": 3}]


def test_coverage_gate():
    # i->you (ratio 0), was->were (2*1/7), like = like, there->here (2*4/9 = 0.89 >= 0.8).
    half = judge("you were like [laughs] here")
    assert half["coverage"] == 0.5 and half["verdict_3class"] == "rendered"  # exactly 50 % passes
    garbled = judge("you were nice [laughs] here")
    assert garbled["coverage"] == 0.25
    assert verdicts(garbled) == ("not_rendered", "not_rendered", 0, 0)
    # The laugh was requested, so the gated clip is not also charged with an unrequested sound;
    # a second, extra tag still is.
    assert verdicts(judge("you were nice [laughs] here [sighs]"))[2:] == (1, 1)


def test_empty_transcript_is_not_rendered_not_listener_error():
    out = judge("")
    assert out["listener_error"] is False
    assert out["coverage"] == 0.0
    assert verdicts(out) == ("not_rendered", "not_rendered", 0, 0)


def test_listener_error_null_or_missing_transcript():
    out = judge(None)
    assert out["listener_error"] is True
    assert verdicts(out) == (None, None, None, None) and out["hyp_tags"] is None
    other = {**PROMPT, "id": "p2"}
    missing = score_records([PROMPT, other], [{"id": "p1", "hyp": "I was like [laughs] there"}])
    assert [v["listener_error"] for v in missing] == [False, True]
    with pytest.raises(ValueError):
        score_records([PROMPT], [{"id": "p1", "hyp": "a"}, {"id": "p1", "hyp": "b"}])


def test_laugh_chuckle_folding():
    chuckle_prompt = {**PROMPT, "nvv": "chuckle", "text_with_mark": "I was, like, <chuckle> there."}
    assert verdicts(judge("I was like [laughs] there", chuckle_prompt)) == ("wrong_class", "rendered", 0, 0)
    # A chuckle elsewhere: no laugh anywhere (3-class not_rendered, the chuckle unrequested),
    # but laughter elsewhere (2-class misplaced, consumed).
    assert verdicts(judge("I [chuckles] was like there")) == ("not_rendered", "misplaced", 1, 0)


def test_spelling_map_from_json(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"*giggle*": "chuckle", "[noise]": None}))
    spellings = load_spellings(path)
    assert spellings["<laugh>"] == "laugh" and "[laughs]" not in spellings
    assert tokenize("a *giggle* b [noise] <sigh>", spellings) == [
        ("w", "a"),
        ("w", "giggle"),
        ("w", "b"),
        ("t", "sigh"),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"[lol]": "laughter"}))
    with pytest.raises(ValueError):
        load_spellings(bad)


def test_verifier_style_hyp_tags():
    def v(tags):
        return score_prompt(PROMPT, {"id": "p1", "hyp_tags": tags})

    assert verdicts(v([{"cls": "laugh", "index": 3}])) == ("rendered", "rendered", 0, 0)
    assert v([{"cls": "laugh", "index": 3}])["coverage"] is None  # steps 1-3 skipped
    # -1 = heard, position unknown: never at the requested word, so at best misplaced.
    assert verdicts(v([{"cls": "[laughs]", "index": -1}])) == ("misplaced", "misplaced", 0, 0)
    assert verdicts(v([{"cls": "sighs", "index": -1}])) == ("not_rendered", "not_rendered", 1, 1)
    assert verdicts(v([])) == ("not_rendered", "not_rendered", 0, 0)
    with pytest.raises(ValueError):
        v([{"cls": "laugh", "index": -2}])


def _v(nvv, v3, v2, s3=0, s2=0, error=False):
    if error:
        return {
            "nvv": nvv,
            "listener_error": True,
            "verdict_3class": None,
            "verdict_2class": None,
            "spurious_3class": None,
            "spurious_2class": None,
        }
    return {
        "nvv": nvv,
        "listener_error": False,
        "verdict_3class": v3,
        "verdict_2class": v2,
        "spurious_3class": s3,
        "spurious_2class": s2,
    }


R, W, M, N = "rendered", "wrong_class", "misplaced", "not_rendered"
# Listener A run 1: laughter 2/2, sigh 1/2, laugh 1/1, chuckle 0/1, unrequested 1/4 (1 listener error).
A1 = [
    _v("laugh", R, R),
    _v("chuckle", W, R),
    _v("sigh", R, R, 1, 1),
    _v("sigh", N, N),
    _v("laugh", None, None, error=True),
]
# Listener A run 2: laughter 1/2, sigh 2/2, laugh 0/1, chuckle 1/1, unrequested 0/4.
A2 = [_v("laugh", M, M), _v("chuckle", R, R), _v("sigh", R, R), _v("sigh", R, R)]
# Listener B: laughter 1/2, sigh 1/2 -> S 0.5; unrequested 0 in 2-class, 1/4 in 3-class.
B1 = [_v("laugh", N, M, 1, 0), _v("chuckle", R, R), _v("sigh", R, R), _v("sigh", N, N)]


def test_aggregate_hand_numbers():
    res = aggregate("sys", {"A": [A1, A2], "B": [B1]})
    a, b = res.listeners
    # A: laughter mean(1, .5) = .75, sigh mean(.5, 1) = .75, S = .75; B: S = (.5 + .5) / 2.
    assert (a.laughter, a.sigh, a.s) == (0.75, 0.75, 0.75)
    assert (a.rendered["laugh"], a.rendered["chuckle"]) == (0.5, 0.5)
    assert (a.unrequested, a.listener_errors, a.clips, a.runs) == (0.125, 1, 4, 2)
    assert a.split["laugh"] == {R: 0.5, W: 0.0, M: 0.5, N: 0.0}
    assert (b.s, b.unrequested, b.unrequested_3class) == (0.5, 0.0, 0.25)
    assert res.score == 0.625
    assert "| A | 2 | 4.000 | 1 | 0.750 | 0.750 | 0.750 | 0.500 | 0.500 | 0.125 |" in res.markdown()


def test_system_without_sigh_scores_zero_for_sigh():
    # Declared unsupported: rendered sigh verdicts do not count.
    res = aggregate("no-sigh", {"A": [A1, A2]}, unsupported=["sigh"])
    assert (res.listeners[0].sigh, res.listeners[0].s, res.score) == (0.0, 0.375, 0.375)
    assert res.unsupported == {"sigh"} and not res.never_requested
    assert "cannot be asked for (counted 0): sigh" in res.markdown()
    # Inferred: no verdict file ever requests a sigh.
    only_laughs = [v for v in A1 if v["nvv"] != "sigh"]
    res = aggregate("no-sigh", {"A": [only_laughs]})
    assert (res.listeners[0].laughter, res.listeners[0].sigh, res.score) == (1.0, 0.0, 0.5)
    assert "Classes no verdict file requests (counted 0): sigh" in res.markdown()
    assert res.listeners[0].split["sigh"]["rendered"] is None  # no sigh requests: n/a, not 0
    with pytest.raises(ValueError):
        aggregate("x", {"A": [A1]}, unsupported=["giggle"])


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "evaluation.nova", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_cli_round_trip(tmp_path, capsys):
    sigh_prompt = {
        "id": "p2",
        "text": "Fine, whatever.",
        "text_with_mark": "Fine, <sigh> whatever.",
        "nvv": "sigh",
        "requested_index": 1,
        "n_words": 2,
    }
    prompts = _write_jsonl(tmp_path / "prompts.jsonl", [PROMPT, sigh_prompt, {**PROMPT, "id": "p3"}])
    transcripts = _write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"id": "p1", "hyp": "I was like [giggles] there"},
            {"id": "p2", "hyp": "fine [sighs] whatever [sighs]"},
            {"id": "p3", "hyp": None},
        ],
    )
    spellings = tmp_path / "map.json"
    spellings.write_text(json.dumps({"[giggles]": "chuckle", "[sighs]": "sigh"}))
    out = tmp_path / "verdicts.jsonl"
    done = _run(
        "score", "--prompts", prompts, "--transcripts", transcripts, "--out", str(out), "--spellings", str(spellings)
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert list(lines[0]) == [
        "id",
        "nvv",
        "requested_index",
        "coverage",
        "listener_error",
        "verdict_3class",
        "verdict_2class",
        "spurious_3class",
        "spurious_2class",
        "hyp_tags",
    ]
    assert [(x["id"], x["verdict_3class"], x["verdict_2class"], x["spurious_2class"]) for x in lines] == [
        ("p1", W, R, 0),
        ("p2", R, R, 1),
        ("p3", None, None, None),
    ]
    csv_path = tmp_path / "nova.csv"
    done = _run("aggregate", "--system", "demo", "--listener", f"asr={out},{out}", "--csv", str(csv_path))
    assert done.returncode == 0, done.stderr
    # laughter 1/1 (2-class), sigh 1/1 -> S 1.0; unrequested 1 of 2 scored clips.
    assert "Score (mean S over 1 listener(s)): 1.000" in done.stdout
    row = next(csv.DictReader(csv_path.open()))
    assert (row["listener"], row["runs"], float(row["S"]), float(row["unrequested"]), float(row["chuckle"])) == (
        "asr",
        "2",
        1.0,
        0.5,
        0.0,
    )
    # A system whose own map has no sigh spelling gets 0 for sigh (in-process: same main()).
    no_sigh = tmp_path / "nosigh.json"
    no_sigh.write_text(json.dumps({"[laughs]": "laugh"}))
    assert main(["aggregate", "--system", "demo", "--listener", f"asr={out}", "--spellings", str(no_sigh)]) == 0
    assert "Score (mean S over 1 listener(s)): 0.500" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["aggregate", "--system", "demo", "--listener", "asr"])
