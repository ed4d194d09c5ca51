"""Tests for evaluation.indicemo: hand-computed consensus, delivery means, ranks and win rates.

Run: .venv/bin/python -m pytest tests/evaluation/test_indicemo.py -q
"""

import csv
import json

import pytest

from evaluation.indicemo import aggregate, main, parse_score

JUDGES = ("j1", "j2", "j3")


def rows(pid, delivery, table, **extra):
    """table: {judge: (A, B, C)} -> judgment records."""
    out = []
    for judge, scores in table.items():
        for system, score in zip("ABC", scores, strict=True):
            out.append(
                {
                    "prompt_id": pid,
                    "judge_id": judge,
                    "system_id": system,
                    "expression_quality_score": score,
                    "target_delivery": delivery,
                    **extra,
                }
            )
    return out


RECORDS = (
    # medians A4 B4 C2: A and B tie for first -> ranks 1.5, 1.5, 3; wins .5, .5, 0
    rows("p1", "Happy", {"j1": (5, 3, 3), "j2": (4, 4, 2), "j3": (3, 5, 1)})
    # medians A5 B3 C1 -> ranks 1, 2, 3
    + rows("p9", "happy", {"j1": (5, 3, 1), "j2": (5, 3, 1), "j3": (4, 4, 2)})
    # medians A2 B4 C3 -> ranks 3, 1, 2 (delivery written in lower case)
    + rows("p2", "sad", {"j1": (2, 4, 3), "j2": (3, 4, 3), "j3": (2, 5, 4)})
    # medians A4 B1 C2 -> ranks 1, 3, 2
    + rows("p3", "ANGRY", {"j1": (5, 1, 2), "j2": (4, 2, 2), "j3": (4, 1, 2)})
    # medians A3 B3 C3: 3-way tie -> all rank 2, 1/3 win each
    + rows("p4", " Professional ", {"j1": (3, 3, 3), "j2": (3, 3, 4), "j3": (2, 3, 3)})
    # medians A1 B2 C5 -> ranks 3, 2, 1 (score "5" given as a string is accepted)
    + rows("p7", "Excited", {"j1": (1, 2, 5), "j2": (2, 2, 4), "j3": (1, 3, "5")})
    # excluded: j2 gives C a 6 (out of range)
    + rows("p5", "Excited", {"j1": (4, 2, 5), "j2": (4, 2, 6), "j3": (1, 1, 1)})
    # excluded: j3 never scored system B
    + [
        r
        for r in rows("p6", "Happy", {"j1": (5, 5, 5), "j2": (5, 5, 5), "j3": (5, 5, 5)})
        if not (r["judge_id"] == "j3" and r["system_id"] == "B")
    ]
    # excluded: marked outside the common set by its producer
    + rows("p8", "Sad", {"j1": (1, 1, 5), "j2": (1, 1, 5), "j3": (1, 1, 5)}, strict_common_set=False)
    # excluded: "N/A" is not a score
    + rows("p10", "Angry", {"j1": (1, 1, "N/A"), "j2": (1, 1, 5), "j3": (1, 1, 5)})
)


def by_system(result):
    return {s.system: s for s in result.systems}


def test_hand_computed_aggregate():
    res = aggregate(RECORDS)
    assert sorted(res.valid_prompts) == ["p1", "p2", "p3", "p4", "p7", "p9"]
    assert sorted(res.excluded) == ["p10", "p5", "p6", "p8"]
    assert res.prompts_per_delivery == {"Happy": 2, "Sad": 1, "Angry": 1, "Excited": 1, "Professional": 1}
    s = by_system(res)
    # Happy = mean of p1 and p9: A (4+5)/2, B (4+3)/2, C (2+1)/2.
    assert s["A"].per_delivery == {"Happy": 4.5, "Sad": 2, "Angry": 4, "Excited": 1, "Professional": 3}
    assert s["C"].per_delivery == {"Happy": 1.5, "Sad": 3, "Angry": 2, "Excited": 5, "Professional": 3}
    # All five, equal weight per delivery: A (4.5+2+4+1+3)/5 = 2.9 (pooling the 6 prompts
    # would give 19/6); B (3.5+4+1+2+3)/5 = 2.7; C (1.5+3+2+5+3)/5 = 2.9.
    assert s["A"].all_five == pytest.approx(2.9)
    assert s["B"].all_five == pytest.approx(2.7)
    assert s["C"].all_five == pytest.approx(2.9)
    # Four emotions: A 11.5/4, B 10.5/4, C 11.5/4.
    assert (s["A"].four_emotions, s["B"].four_emotions, s["C"].four_emotions) == (2.875, 2.625, 2.875)
    # Ranks over p1 p9 p2 p3 p4 p7: A 1.5+1+3+1+2+3, B 1.5+2+1+3+2+2, C 3+3+2+2+2+1.
    assert s["A"].mean_rank == pytest.approx(11.5 / 6)
    assert s["B"].mean_rank == pytest.approx(11.5 / 6)
    assert s["C"].mean_rank == pytest.approx(13 / 6)
    # Wins: A .5+1+0+1+1/3+0, B .5+0+1+0+1/3+0, C 0+0+0+0+1/3+1.
    assert s["A"].win_rate == pytest.approx((2.5 + 1 / 3) / 6)
    assert s["B"].win_rate == pytest.approx((1.5 + 1 / 3) / 6)
    assert s["C"].win_rate == pytest.approx((1 + 1 / 3) / 6)
    assert res.consensus[("p1", "B")] == 4
    # Ordered by "all five", ties by name.
    assert [x.system for x in res.systems] == ["A", "C", "B"]


def test_invalid_judgment_excludes_prompt_for_everyone():
    res = aggregate(RECORDS)
    assert "6" in res.excluded["p5"] and "j2" in res.excluded["p5"]
    assert "j3" in res.excluded["p6"] and "system B" in res.excluded["p6"]
    assert res.excluded["p8"] == "strict_common_set is false"
    # Without p5's bad score, p5 would count (C's Excited mean changes).
    fixed = [
        (
            dict(r, expression_quality_score=5)
            if (r["prompt_id"], r["judge_id"], r["system_id"]) == ("p5", "j2", "C")
            else r
        )
        for r in RECORDS
    ]
    assert by_system(aggregate(fixed))["C"].per_delivery["Excited"] == 5  # median(5,5,1)=5, p7 5


def test_even_number_of_judges_and_rerating():
    recs = rows("q1", "Happy", {"j1": (3, 2, 1), "j2": (4, 2, 1)})
    recs.append(
        {
            "prompt_id": "q1",
            "judge_id": "j2",
            "system_id": "B",
            "expression_quality_score": 5,
            "target_delivery": "Happy",
        }
    )
    res = aggregate(recs)
    s = by_system(res)
    # A median(3, 4) = 3.5; B: j2's re-rating 5 replaces 2 -> median(2, 5) = 3.5: tie for first.
    assert (s["A"].per_delivery["Happy"], s["B"].per_delivery["Happy"]) == (3.5, 3.5)
    assert (s["A"].mean_rank, s["B"].mean_rank, s["C"].mean_rank) == (1.5, 1.5, 3)
    assert (s["A"].win_rate, s["B"].win_rate, s["C"].win_rate) == (0.5, 0.5, 0)
    # Only Happy has prompts: the other deliveries are n/a and left out of the means.
    assert s["A"].all_five == 3.5 and s["A"].per_delivery["Sad"] is None
    assert "No valid prompt for: Sad, Angry, Excited, Professional" in res.markdown()


def test_delivery_names_case_insensitive_but_consistent():
    assert aggregate(rows("x", "eXcItEd", {"j1": (1, 2, 3)})).prompts_per_delivery["Excited"] == 1
    with pytest.raises(ValueError):
        aggregate(rows("x", "Happy", {"j1": (1, 2, 3)}) + rows("x", "Sad", {"j2": (1, 2, 3)}))
    with pytest.raises(ValueError):
        aggregate(rows("x", "Bored", {"j1": (1, 2, 3)}))
    with pytest.raises(ValueError):
        aggregate([{"prompt_id": "x", "system_id": "A", "target_delivery": "Sad"}])


@pytest.mark.parametrize(
    "value, expected",
    [
        (1, 1.0),
        (5, 5.0),
        (3.5, 3.5),
        ("4", 4.0),
        (0, None),
        (6, None),
        (True, None),
        (None, None),
        ("", None),
        (float("nan"), None),
    ],
)
def test_parse_score(value, expected):
    assert parse_score(value) == expected


def test_cli_markdown_and_csv(tmp_path, capsys):
    path = tmp_path / "j.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    out = tmp_path / "emo.csv"
    assert main(["aggregate", "--judgments", str(path), "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "6 of 10 prompts valid for every judge" in text
    assert "| A | 4.500 | 2.000 | 4.000 | 1.000 | 3.000 | 2.900 | 2.875 | 1.917 | 0.472 |" in text
    table = list(csv.DictReader(out.open()))
    assert [r["system"] for r in table] == ["A", "C", "B"]
    assert float(table[2]["all_five"]) == pytest.approx(2.7) and table[2]["prompts"] == "6"
    assert main(["aggregate", "--judgments", str(tmp_path / "missing.jsonl")]) == 2  # a user error
