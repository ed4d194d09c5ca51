"""Statistics and rater screening of the listening-test designs (`evaluation.listening_tests`,
`evaluation.listening_screening`) against figures worked out by hand on small typed-in tables:
the P.808 t interval, the two-way bootstrap's resample distribution enumerated, the Wilcoxon
signed-rank p-value by enumerating sign assignments, Holm by hand, letter displays of textbook
cases (and of every graph on five conditions), MUSHRA mean/median/IQR, Krippendorff's alpha of a
coincidence worked out below, and screening that must remove exactly the planted raters.

Run: python -m pytest -n0 tests/evaluation/test_listening_tests.py -q
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
import scipy.stats

from evaluation import listening_tests as lt
from evaluation.listening_screening import apply_screening, screen, screen_mushra, screen_p808
from evaluation.listening_tests import (
    ListeningTestError,
    Scoring,
    agreement,
    analyse,
    cmos_table,
    compact_letters,
    holm,
    mos_table,
    mushra_boxplot,
    mushra_table,
    p808_ci,
    publication_table,
    results_numbers,
    two_way_bootstrap,
    two_way_resample_means,
    wilcoxon_p,
)
from rumik_app.errors import RumikError

# What the campaign designs tell the statistics about their scores (webapp.campaign.designs).
MOS = Scoring("mos", "MOS", "ordinal", domain=(1, 2, 3, 4, 5))
CMOS = Scoring("cmos", "CMOS", "interval", against_reference=True)
MUSHRA = Scoring("mushra", "MUSHRA", "interval", roles=("test", "reference", "anchor"), paired_by_trial=True)
# t(0.975, df) from tables
T_975 = {2: 4.302652729749462, 4: 2.7764451051977934, 5: 2.5705818356363146, 7: 2.3646242515927844}


def row(design: str, rater: str, prompt: str, condition: str, score: float, *, kind: str = "test",
        role: str = "test", entry: str | None = None, reference: str | None = None, raw: float | None = None,
        side: str | None = None, expected: float | None = None, seconds: float | None = 6.0,
        clip: str = "c" * 32, stimulus: int = 0) -> dict:
    """One rating row in the campaign_scores layout."""
    item = {"mushra": prompt, "cmos": f"{prompt}/{condition}~{reference}"}.get(design, f"{prompt}/{condition}")
    if kind == "gold":
        item = f"gold/{prompt}/{condition}"
    elif kind == "trap":
        item = f"trap/{prompt}"
    return {"campaign": "c1", "design": design, "entry_id": entry or f"{rater}|{prompt}|{condition}|{kind}",
            "stimulus": stimulus, "slot": 0, "position": 0, "rater": rater, "item_id": item, "prompt_id": prompt,
            "kind": kind, "role": role, "condition": condition, "reference": reference, "clip_id": clip,
            "score": float(score), "raw_score": raw, "side": side, "expected": expected, "shown_at": None,
            "submitted_at": "2026-01-01T00:00:00Z", "seconds": seconds}


# ---------------------------------------------------------------- P.808 interval


def test_p808_ci_by_hand():
    # [4, 5, 3, 4, 2]: mean 3.6, squared deviations .16 + 1.96 + .36 + .16 + 2.56 = 5.2, s = sqrt(5.2 / 4)
    half = T_975[4] * math.sqrt(5.2 / 4) / math.sqrt(5)
    est = p808_ci([4, 5, 3, 4, 2])
    assert est.n == 5
    assert est.mean == pytest.approx(3.6)
    assert (est.low, est.high) == pytest.approx((3.6 - half, 3.6 + half))
    assert half == pytest.approx(1.41571, abs=1e-5)


def test_p808_ci_without_enough_ratings():
    assert p808_ci([]).mean is None
    one = p808_ci([3])
    assert (one.mean, one.low, one.high, one.n) == (3.0, None, None, 1)


# ---------------------------------------------------------------- two-way bootstrap


def _grid_rows(values: dict[tuple[str, str], float]) -> list[dict]:
    return [row("mos", r, p, "x", v) for (p, r), v in values.items()]


def _possible_means(values: dict[tuple[str, str], float]) -> dict[float, float]:
    """Every resample mean of a 2-prompt x 2-rater table with its probability: each side is drawn
    twice with replacement, so its counts are (2, 0), (1, 1), (0, 2) with probability 1/4, 1/2, 1/4."""
    draws = {(2, 0): 0.25, (1, 1): 0.5, (0, 2): 0.25}
    out: dict[float, float] = Counter()
    for (cp, pp), (cr, pr) in itertools.product(draws.items(), draws.items()):
        w = {(p, r): cp[int(p[1])] * cr[int(r[1])] for (p, r) in values}
        total = sum(w.values())
        if total:
            out[round(sum(w[k] * v for k, v in values.items()) / total, 9)] += pp * pr
    return out


def test_two_way_resamples_prompts_and_raters_with_product_multiplicity():
    values = {("p0", "r0"): 1.0, ("p0", "r1"): 2.0, ("p1", "r0"): 4.0, ("p1", "r1"): 8.0}
    means = two_way_resample_means(_grid_rows(values), seed=3, n_resamples=20000)
    expected = _possible_means(values)
    seen = Counter(round(float(m), 9) for m in means)
    assert set(seen) <= set(expected)  # (1/4, 1/2, 1/4)-weighted product counts, nothing else
    for m, prob in expected.items():
        assert seen[m] / means.size == pytest.approx(prob, abs=0.015)


def test_two_way_bootstrap_skips_resamples_without_a_rated_pair():
    values = {("p0", "r0"): 1.0, ("p1", "r1"): 3.0}  # drawing p0 twice and r1 twice meets no rating
    means = two_way_resample_means(_grid_rows(values), seed=1, n_resamples=16000)
    assert means.size / 16000 == pytest.approx(1 - 2 / 16, abs=0.015)
    assert set(np.round(means, 9)) <= {1.0, 2.0, 3.0}


def test_two_way_bootstrap_is_reproducible_and_contains_the_mean():
    rng = np.random.default_rng(7)
    rows = [row("mos", f"r{r}", f"p{p}", "x", int(rng.integers(1, 6))) for r in range(6) for p in range(8)]
    a, b = two_way_bootstrap(rows, seed=11), two_way_bootstrap(rows, seed=11)
    other = two_way_bootstrap(rows, seed=12)
    assert a == b
    assert (other.low, other.high) != (a.low, a.high)
    assert a.low < a.mean < a.high
    assert a.mean == pytest.approx(np.mean([r["score"] for r in rows]))
    assert a.n == 48


def test_two_way_bootstrap_chunks_give_the_same_resamples(monkeypatch):
    rows = [row("mos", f"r{r}", f"p{p}", "x", (r * 3 + p) % 5 + 1) for r in range(4) for p in range(5)]
    whole = two_way_resample_means(rows, seed=5, n_resamples=300)
    monkeypatch.setattr(lt, "BOOTSTRAP_CHUNK_CELLS", 7)  # 1 resample per chunk
    np.testing.assert_allclose(two_way_resample_means(rows, seed=5, n_resamples=300), whole)


# ---------------------------------------------------------------- Wilcoxon, Holm, letters


def _exact_two_sided(differences: list[float]) -> float:
    """Two-sided signed-rank p by enumerating all 2^k sign assignments of the k non-zero differences
    (no ties among them): P(|W+ - centre| >= |w+ - centre|), W+ the rank sum of the positive ones.
    Pratt: the ranks are taken with the zeros in the ranking, then the zeros' ranks dropped."""
    ranks = scipy.stats.rankdata(np.abs(differences))[np.asarray(differences) != 0]
    signs_seen = [d > 0 for d in differences if d != 0]
    centre = ranks.sum() / 2
    observed = abs(sum(r for r, pos in zip(ranks, signs_seen, strict=True) if pos) - centre)
    hits = sum(abs(sum(r for r, s in zip(ranks, signs, strict=True) if s) - centre) >= observed - 1e-12
               for signs in itertools.product([True, False], repeat=len(ranks)))
    return hits / 2 ** len(ranks)


def test_wilcoxon_p_matches_exact_enumeration():
    d = [0.5, -1.25, 2.0, 3.5, 4.25, -0.75, 5.0, 6.5]  # W+ = 36 - (3 + 2) = 31, centre 18
    # |W+ - 18| >= 13: W+ <= 5 or (by symmetry) >= 31; rank sets summing to <= 5: {}, {1}, {2}, {3}, {4},
    # {5}, {1,2}, {1,3}, {1,4}, {2,3} -> 10, twice -> 20 of 256
    p = _exact_two_sided(d)
    assert p == pytest.approx(20 / 256)
    assert wilcoxon_p(d) == pytest.approx(20 / 256)
    assert scipy.stats.wilcoxon(d).pvalue == pytest.approx(20 / 256)


def test_wilcoxon_p_keeps_zeros_in_the_ranking_pratt():
    # ranks of |0|, |1|, |2|, |-3|, |4|, |5| are 1..6; the zero's rank 1 is dropped: W+ = 2 + 3 + 5 + 6 = 16 of 20,
    # centre 10; rank sets of {2..6} summing to <= 4: {}, {2}, {3}, {4} -> 4, twice -> 8 of 32.
    # ("wilcox" would drop the zero first: ranks 1..5, p = 10/32.)
    d = [0, 1, 2, -3, 4, 5]
    assert _exact_two_sided(d) == pytest.approx(8 / 32)
    assert wilcoxon_p(d) == pytest.approx(8 / 32)
    assert scipy.stats.wilcoxon(d, zero_method="pratt").pvalue == pytest.approx(8 / 32)


def test_wilcoxon_p_with_nothing_to_test_is_one():
    assert wilcoxon_p([]) == 1.0
    assert wilcoxon_p([0, 0, 0]) == 1.0


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06 for the last
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


@pytest.mark.parametrize(("different", "expected"), [
    ([], {"A": "a", "B": "a", "C": "a"}),
    ([("A", "B"), ("A", "C"), ("B", "C")], {"A": "a", "B": "b", "C": "c"}),
    ([("A", "C")], {"A": "a", "B": "ab", "C": "b"}),
    ([("C", "A")], {"A": "a", "B": "ab", "C": "b"}),  # pair order does not matter
    ([("A", "B"), ("A", "C")], {"A": "a", "B": "b", "C": "b"}),
])
def test_compact_letters_textbook_cases(different, expected):
    assert compact_letters(["A", "B", "C"], different) == expected


def test_compact_letters_staircase_and_cycle():
    # staircase: 1 differs from 3 and 4, 2 from 4 -> groups {1,2}, {2,3}, {3,4}
    assert compact_letters(["1", "2", "3", "4"], [("1", "3"), ("1", "4"), ("2", "4")]) == \
        {"1": "a", "2": "ab", "3": "bc", "4": "c"}
    # a 4-cycle of "not different" (1-2, 2-3, 3-4, 4-1) needs four letters: {1,2} a, {1,4} b, {2,3} c, {3,4} d
    assert compact_letters(["1", "2", "3", "4"], [("1", "3"), ("2", "4")]) == \
        {"1": "ab", "2": "ac", "3": "cd", "4": "bd"}


def test_compact_letters_share_a_letter_iff_not_different_for_every_graph_on_five():
    names = list("ABCDE")
    pairs = list(itertools.combinations(names, 2))
    for mask in range(2 ** len(pairs)):
        different = [p for k, p in enumerate(pairs) if mask >> k & 1]
        letters = compact_letters(names, different)
        for a, b in pairs:
            assert bool(set(letters[a]) & set(letters[b])) == ((a, b) not in different), (different, letters)


def test_compact_letters_rejects_unknown_conditions():
    with pytest.raises(ListeningTestError, match="two of the conditions"):
        compact_letters(["A", "B"], [("A", "Z")])


# ---------------------------------------------------------------- MOS table and pairwise tests

# raters r1, r2 x prompts p1..p4, every unit rates A, B and C
MOS_SCORES = {"A": [5, 5, 4, 5, 4, 5, 5, 4], "B": [5, 3, 2, 5, 2, 5, 3, 4], "C": [2, 3, 2, 3, 2, 2, 3, 1]}
UNITS = [(r, p) for r in ("r1", "r2") for p in ("p1", "p2", "p3", "p4")]


def _mos_rows(design: str = "mos") -> list[dict]:
    return [row(design, r, p, c, s[k]) for c, s in MOS_SCORES.items() for k, (r, p) in enumerate(UNITS)]


def test_mos_table_means_cis_and_letters_by_hand():
    table = mos_table(_mos_rows(), seed=0, n_resamples=500)
    assert [s.condition for s in table] == ["A", "B", "C"]  # means 37/8, 29/8, 18/8
    assert [s.mean for s in table] == pytest.approx([37 / 8, 29 / 8, 18 / 8])
    a = table[0]
    assert (a.n_ratings, a.n_raters) == (8, 2)
    assert a.ci == p808_ci(MOS_SCORES["A"])
    assert a.bootstrap == two_way_bootstrap([r for r in _mos_rows() if r["condition"] == "A"], seed=0,
                                            n_resamples=500)
    # A-C: differences 3,2,2,2,2,3,2,3 (all positive); A-B and B-C: half the units tie (Pratt zeros)
    diffs = {("A", "B"): [0, 2, 2, 0, 2, 0, 2, 0], ("A", "C"): [3, 2, 2, 2, 2, 3, 2, 3],
             ("B", "C"): [3, 0, 0, 2, 0, 3, 0, 3]}
    raw = [scipy.stats.wilcoxon(d, zero_method="pratt").pvalue for d in diffs.values()]
    tests = lt.pairwise_tests(_mos_rows(), ["A", "B", "C"], by_trial=False)
    assert [(t.a, t.b, t.n_pairs, t.paired_by) for t in tests] == [(a, b, 8, "prompt & rater") for a, b in diffs]
    assert [t.p_raw for t in tests] == pytest.approx(raw)
    order = np.argsort(raw)  # Holm by hand: smallest x3, next x2 (running max), largest x1
    by_hand = np.empty(3)
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (3 - k) * raw[i]))
        by_hand[i] = running
    assert [t.p_holm for t in tests] == pytest.approx(by_hand.tolist())
    assert [t.significant for t in tests] == [False, True, False]
    assert [s.letters for s in table] == ["a", "ab", "b"]


def test_pairs_fall_back_to_prompt_means_when_units_do_not_overlap():
    # each rater hears a prompt in one condition only: no (prompt, rater) unit has both
    rows = [row("mos", f"a{p}", f"p{p}", "A", 4 + p % 2) for p in range(6)]
    rows += [row("mos", f"b{p}", f"p{p}", "B", 2) for p in range(6)]
    rows += [row("mos", f"c{p}", f"p{p}", "B", 3) for p in range(6)]
    diff, by = lt.paired_differences(rows, "A", "B", by_trial=False)
    assert by == "prompt means"
    assert diff.tolist() == [4 - 2.5, 5 - 2.5] * 3  # A's prompt score minus B's mean of 2 and 3


# ---------------------------------------------------------------- CMOS


def test_cmos_table_wilcoxon_and_ci_by_hand():
    rows = [row("cmos", f"r{k}", f"p{k}", "x", s, reference="ref") for k, s in enumerate([3, -1, 2])]
    rows += [row("cmos", "r0", "p0", "x", 1, reference="other")]
    (other, x) = sorted(cmos_table(rows, n_resamples=200), key=lambda s: s.reference)
    assert (x.condition, x.reference, x.n_ratings, x.n_raters) == ("x", "ref", 3, 3)
    # ranks of |3|, |-1|, |2| are 3, 1, 2; W+ = 5, centre 3; sign sets with |W+ - 3| >= 2: {}, {1}, {2,3}, {1,2,3}
    assert x.p_wilcoxon == pytest.approx(4 / 8) == pytest.approx(_exact_two_sided([3, -1, 2]))
    assert x.p_wilcoxon == pytest.approx(scipy.stats.wilcoxon([3, -1, 2]).pvalue)
    # mean 4/3, deviations 5/3, -7/3, 2/3: s^2 = (25 + 49 + 4) / 9 / 2
    half = T_975[2] * math.sqrt(78 / 18) / math.sqrt(3)
    assert (x.ci.mean, x.ci.low, x.ci.high) == pytest.approx((4 / 3, 4 / 3 - half, 4 / 3 + half))
    assert other.ci.low is None and other.n_ratings == 1


# ---------------------------------------------------------------- MUSHRA

# 3 raters x 2 prompts = 6 trials; B is A minus 5, 10, ... 30 on each trial
MUSHRA_A = [60, 70, 80, 90, 50, 65]
MUSHRA_B = [a - d for a, d in zip(MUSHRA_A, [5, 10, 15, 20, 25, 30], strict=True)]


def _mushra_rows() -> list[dict]:
    rows = []
    for k, (r, p) in enumerate((r, p) for r in ("r1", "r2", "r3") for p in ("p1", "p2")):
        entry = f"t{k}"
        rows += [row("mushra", r, p, "reference", 100, role="reference", entry=entry),
                 row("mushra", r, p, "anchor", 20 + k, role="anchor", entry=entry),
                 row("mushra", r, p, "A", MUSHRA_A[k], entry=entry), row("mushra", r, p, "B", MUSHRA_B[k], entry=entry)]
    return rows


def test_mushra_table_by_hand():
    table = {s.condition: s for s in mushra_table(_mushra_rows(), n_resamples=200)}
    assert [s.condition for s in mushra_table(_mushra_rows(), n_resamples=200)] == ["reference", "A", "B", "anchor"]
    a = table["A"]
    # sorted 50 60 65 70 80 90: 25th at position 1.25 -> 61.25, median 67.5, 75th at 3.75 -> 77.5
    assert (a.n_ratings, a.n_raters, a.mean, a.median, a.q25, a.q75) == (6, 3, pytest.approx(415 / 6), 67.5,
                                                                         61.25, 77.5)
    s = math.sqrt(sum((v - 415 / 6) ** 2 for v in MUSHRA_A) / 5)
    assert (a.ci.low, a.ci.high) == pytest.approx((415 / 6 - T_975[5] * s / math.sqrt(6),
                                                   415 / 6 + T_975[5] * s / math.sqrt(6)))
    assert table["reference"].role == "reference" and table["reference"].ci.low == 100.0
    assert table["anchor"].median == pytest.approx(22.5)
    # A - B on every trial: 5..30, all positive: exact two-sided p = 2 / 2^6; one pair, Holm leaves it
    (pair,) = lt.pairwise_tests(_mushra_rows(), ["A", "B"], by_trial=True)
    assert (pair.paired_by, pair.n_pairs, pair.p_raw, pair.p_holm) == ("trial", 6, pytest.approx(2 / 64),
                                                                       pytest.approx(2 / 64))
    assert (table["A"].letters, table["B"].letters, table["reference"].letters) == ("a", "b", "")


def test_mushra_boxplot_writes_a_png(tmp_path):
    path = mushra_boxplot(_mushra_rows(), tmp_path / "charts" / "mushra.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(path).shape[0] > 100
    with pytest.raises(ListeningTestError, match="no MUSHRA"):
        mushra_boxplot([], tmp_path / "none.png")


def _mushra_screen_rows(low_refs: dict[str, int], high_anchors: dict[str, int]) -> list[dict]:
    rows = []
    for rater in sorted(set(low_refs) | set(high_anchors)):
        for item in range(10):
            e = f"{rater}-{item}"
            ref = 70 if item < low_refs.get(rater, 0) else 90  # exactly 90 is not "below 90"
            anc = 95 if item < high_anchors.get(rater, 0) else (90 if item == 9 else 30)  # 90 is not "above"
            rows += [row("mushra", rater, f"p{item}", "reference", ref, role="reference", entry=e),
                     row("mushra", rater, f"p{item}", "anchor", anc, role="anchor", entry=e),
                     row("mushra", rater, f"p{item}", "A", 60, entry=e)]
    return rows


def test_mushra_screening_excludes_exactly_the_planted_raters():
    rows = _mushra_screen_rows({"good": 0, "ref_once": 1, "ref_twice": 2, "anchor_twice": 0},
                               {"anchor_twice": 2, "anchor_once": 1})
    screening = screen_mushra(rows, "mushra")
    assert screening.excluded == {"ref_twice", "anchor_twice"}  # 2 of 10 = 20 % > 15 %; 1 of 10 is kept
    (ref_reason,) = screening.raters["ref_twice"].reasons
    assert ref_reason.startswith("reference:") and "2 of 10" in ref_reason and "BS.1534-3 §4.1.2" in ref_reason
    (anchor_reason,) = screening.raters["anchor_twice"].reasons
    assert anchor_reason.startswith("anchor:") and "BS.1534-3" in anchor_reason
    assert screen(rows, "bs1534", "mushra") == screening
    assert {r["rater"] for r in apply_screening(rows, screening)} == {"good", "ref_once", "anchor_once"}


# ---------------------------------------------------------------- P.808 screening


def _p808_rows() -> list[dict]:
    rows = []
    varied = [1, 2, 3, 4, 5, 4, 3, 2]
    for rater in ("good", "trap_fail", "gold_fail", "gold_half", "flat", "fast"):
        seconds = 1.0 if rater == "fast" else 6.0
        for k, s in enumerate(varied):
            rows.append(row("mos", rater, f"p{k // 2}", "ab"[k % 2], 3 if rater == "flat" else s, seconds=seconds))
        rows.append(row("mos", rater, "p9", "trap", 4 if rater == "trap_fail" else 2, kind="trap", role="trap",
                        expected=2, seconds=seconds))
        golds = {"gold_fail": [(5, 3), (1, 3), (5, 5)], "gold_half": [(5, 2), (1, 1)]}.get(rater, [(5, 4), (1, 2)])
        for k, (exp, s) in enumerate(golds):  # off by exactly 1 counts as right
            rows.append(row("mos", rater, f"g{k}", "gold:espeak", s, kind="gold", role="gold", expected=exp,
                            seconds=seconds))
    rows.append(row("mos", "once", "p0", "a", 4))  # one test answer: no variance to judge, kept
    return rows


@pytest.mark.filterwarnings("error")
def test_p808_screening_removes_exactly_the_planted_raters():
    rows = _p808_rows()
    screening = screen_p808(rows, clip_durations={"c" * 32: 3.0})
    assert screening.excluded == {"trap_fail", "gold_fail", "flat", "fast"}
    assert screening.kept == {"good", "gold_half", "once"}  # 1 of 2 gold wrong is not more than 50 %
    reasons = {r: screening.raters[r].reasons for r in screening.excluded}
    assert all(len(v) == 1 for v in reasons.values()), reasons
    assert reasons["trap_fail"][0].startswith("trap: 1 of 1") and "check_tps" in reasons["trap_fail"][0]
    assert "P.808 §6.3.8" in reasons["trap_fail"][0]
    assert reasons["gold_fail"][0].startswith("gold: 2 of 3") and "check_gold_question" in reasons["gold_fail"][0]
    assert reasons["flat"][0].startswith("variance: sample variance 0.000") and "check_variance" in reasons["flat"][0]
    assert reasons["fast"][0].startswith("speed: median trial time is 2.00 s shorter")
    kept = apply_screening(rows, screening)
    assert {r["rater"] for r in kept} == {"good", "gold_half", "once"}
    assert len(kept) == sum(r["rater"] in {"good", "gold_half", "once"} for r in rows)


def test_speed_rule_needs_durations_or_a_floor():
    assert "fast" not in screen_p808(_p808_rows()).excluded
    floor = screen_p808(_p808_rows(), min_median_seconds=2.0)
    assert "fast" in floor.excluded and "below 2 s" in floor.raters["fast"].reasons[0]


def test_cmos_screening_judges_the_clicks_as_given():
    rows = []
    for k in range(6):  # "sideways" always clicks +2 (second clip better); the side flips the score's sign
        side = "AB"[k % 2]
        rows.append(row("cmos", "sideways", f"p{k}", "x", 2 if side == "B" else -2, reference="ref", raw=2, side=side))
        rows.append(row("cmos", "honest", f"p{k}", "x", k % 3 - 1, reference="ref", raw=k % 3 - 1, side="B"))
    rows.append(row("cmos", "honest", "p9", "trap", 1, kind="trap", role="trap", raw=1, expected=0))
    strict = screen(rows, "p808", "cmos")
    assert strict.excluded == {"sideways", "honest"}
    assert strict.raters["sideways"].reasons[0].startswith("variance:")
    assert strict.raters["honest"].reasons[0].startswith("trap:")
    assert screen(rows, "p808", "cmos", trap_tolerance=1).excluded == {"sideways"}  # the toolkit's CCR trap: -1..1


def test_screening_and_statistics_reject_unknown_rules_and_scales():
    with pytest.raises(RumikError, match="unknown screening rules 'abx'; use one of p808, bs1534"):
        screen([], "abx")
    assert screen_p808([], "mos").design == "mos" and screen([], "bs1534").design == "bs1534"  # labels, not checks
    with pytest.raises(ListeningTestError, match="level 'nominalish'"):
        Scoring("x", "X", "nominalish")
    with pytest.raises(ListeningTestError, match="roles"):
        Scoring("x", "X", "interval", roles=("reference",))
    with pytest.raises(ListeningTestError, match="give a Scoring"):
        analyse([], "abx")
    with pytest.raises(ListeningTestError, match="level 'abx'"):
        agreement([], "abx")


# ---------------------------------------------------------------- agreement


def test_agreement_interval_alpha_by_hand():
    # rater A: u1 = 1, u2 = 3; rater B: u1 = 2, u2 = 3. Pairable values 1, 2, 3, 3 (n = 4).
    # D_o = (1/n) sum_u sum_ordered pairs delta^2 / (m_u - 1) = (1 + 1) / 4 = 1/2
    # D_e = sum over ordered pairs of all values delta^2 / (n (n - 1)) = 2 (1 + 4 + 4 + 1 + 1 + 0) / 12 = 11/6
    # alpha = 1 - D_o / D_e = 1 - 3/11 = 8/11
    rows = [row("cmos", "A", "u1", "x", 1, reference="ref"), row("cmos", "A", "u2", "x", 3, reference="ref"),
            row("cmos", "B", "u1", "x", 2, reference="ref"), row("cmos", "B", "u2", "x", 3, reference="ref"),
            row("cmos", "A", "g", "gold:espeak", 1, kind="gold", role="gold", expected=1),  # gold: not a test rating
            row("cmos", "B", "g", "gold:espeak", 5, kind="gold", role="gold", expected=1)]
    assert agreement(rows, CMOS.level) == pytest.approx(8 / 11)
    mushra = [{**r, "design": "mushra", "item_id": r["prompt_id"]} for r in rows]
    assert agreement(mushra, MUSHRA.level) == pytest.approx(8 / 11)


def test_agreement_ordinal_mos_units_are_stimuli():
    # both raters agree on every stimulus: alpha 1; prompt p1 in A and in B are different units
    rows = [row("mos", r, "p1", "A", 5) for r in ("r1", "r2")] + [row("mos", r, "p1", "B", 2) for r in ("r1", "r2")]
    assert agreement(rows, MOS.level, MOS.domain) == pytest.approx(1.0)
    rows[1]["score"] = 2.0  # r2 now gives A 2: disagreement
    assert agreement(rows, MOS.level, MOS.domain) < 0.5


# ---------------------------------------------------------------- publication


def test_publication_table_and_numbers_after_screening():
    rows = _mos_rows()
    # a third rater who fails the trap and rates C 5 everywhere: screened out, so nothing changes
    rows += [row("mos", "r3", p, "C", 5) for p in ("p1", "p2", "p3", "p4")]
    rows.append(row("mos", "r3", "p9", "trap", 5, kind="trap", role="trap", expected=1))
    screening = screen(rows, "p808", "mos")
    assert screening.excluded == {"r3"}
    analysis = analyse(rows, MOS, screening=screening, seed=0, n_resamples=300)
    half = T_975[7] * np.std(MOS_SCORES["A"], ddof=1) / math.sqrt(8)
    table = publication_table(analysis)
    lines = table.splitlines()
    assert lines[0] == "| condition | N ratings | N raters | MOS ± 95 % CI | letters |"
    assert lines[2] == f"| A | 8 | 2 | {37 / 8:.2f} ± {half:.2f} | a |"
    assert lines[4].startswith("| C | 8 | 2 | 2.25 ± ") and lines[4].endswith("| b |")
    numbers = json.loads(json.dumps(results_numbers(analysis)))
    assert numbers["n_raters"] == 2 and numbers["n_ratings"] == 24
    assert list(numbers["screening"]["excluded"]) == ["r3"]
    assert [c["condition"] for c in numbers["conditions"]] == ["A", "B", "C"]
    assert [p["significant"] for p in numbers["pairs"]] == [False, True, False]
    assert numbers["alpha"]["level"] == "ordinal" and numbers["alpha"]["value"] == analysis.alpha


def test_publication_table_for_cmos_shows_the_p_value():
    rows = [row("cmos", f"r{k}", f"p{k}", "x", s, reference="ref") for k, s in enumerate([3, -1, 2])]
    table = publication_table(analyse(rows, CMOS, n_resamples=100))
    assert table.splitlines()[2].startswith("| x vs ref | 3 | 3 | 1.33 ± ") and table.endswith("| 0.5 |")
