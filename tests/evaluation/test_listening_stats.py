"""Krippendorff's alpha and the bootstrap CIs of `evaluation.listening_stats` against cases
computed by hand: Krippendorff's own worked example, a coincidence matrix worked out below,
exact bootstrap distributions enumerated over every resample, and a direct NumPy resampling.

Run: .venv/bin/python -m pytest tests/evaluation/test_listening_stats.py -q
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from evaluation.listening_stats import bootstrap_mean, krippendorff_alpha, reliability_matrix

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers,
# 12 units, values 1-5, missing data. Published: nominal .743, ordinal .815, interval .849.
KRIPPENDORFF_EXAMPLE = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def as_ratings(rows: list[list]) -> dict[str, dict[str, object]]:
    return {f"coder{c}": {f"unit{u:02d}": v for u, v in enumerate(row) if v is not None} for c, row in enumerate(rows)}


@pytest.mark.parametrize(("level", "published"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_alpha_reproduces_krippendorffs_worked_example(level, published):
    alpha = krippendorff_alpha(as_ratings(KRIPPENDORFF_EXAMPLE), level, value_domain=[1, 2, 3, 4, 5])
    assert round(alpha, 3) == published


def test_nominal_alpha_of_a_small_case_worked_by_hand():
    # Two raters, four pairs, preferences a/b: unit 1 (a, a), 2 (a, b), 3 (b, b), 4 (b, b).
    # Coincidences (each pairable value pair counted once per ordered pair, / (m_u - 1) = 1):
    #   o_aa = 2, o_ab = o_ba = 1, o_bb = 4; n_a = 3, n_b = 5, n = 8.
    # D_o = (o_ab + o_ba) / n = 2/8;  D_e = 2 n_a n_b / (n (n - 1)) = 30/56;  alpha = 1 - D_o/D_e = 8/15.
    ratings = {"asha": {1: "a", 2: "a", 3: "b", 4: "b"}, "ben": {1: "a", 2: "b", 3: "b", 4: "b"}}
    assert krippendorff_alpha(ratings, "nominal") == pytest.approx(float(Fraction(8, 15)), abs=1e-12)
    # Labels are only names: any other coding gives the same alpha, and so does a third rater on nothing.
    renamed = {r: {u: {"a": "espeak", "b": "none"}[v] for u, v in per.items()} for r, per in ratings.items()}
    assert krippendorff_alpha({**renamed, "ravi": {}}, "nominal") == pytest.approx(8 / 15)


def test_ordinal_alpha_of_a_small_case_worked_by_hand():
    # Two raters, three clips scored (1, 1), (2, 3), (3, 3) on the scale 1..5.
    # Values n_1 = 2, n_2 = 1, n_3 = 3 (n = 6); coincidences o_11 = 2, o_23 = o_32 = 1, o_33 = 2.
    # Ordinal distance d(c, k) = (sum_{g=c..k} n_g - (n_c + n_k)/2)^2: d(1,2) = 1.5^2, d(1,3) = 3.5^2, d(2,3) = 2^2.
    # D_o = 2 * 1 * 4 / 6 = 8/6; D_e = 2 (n1 n2 d12 + n1 n3 d13 + n2 n3 d23) / (n (n-1)) = 2 * 86 / 30.
    ratings = {"asha": {"c1": 1, "c2": 2, "c3": 3}, "ben": {"c1": 1, "c2": 3, "c3": 3}}
    d12, d13, d23 = 1.5**2, 3.5**2, 2.0**2
    d_o = 2 * d23 / 6
    d_e = 2 * (2 * 1 * d12 + 2 * 3 * d13 + 1 * 3 * d23) / (6 * 5)
    assert krippendorff_alpha(ratings, "ordinal", [1, 2, 3, 4, 5]) == pytest.approx(1 - d_o / d_e, abs=1e-12)


def test_alpha_is_undefined_without_overlap_or_variation():
    assert krippendorff_alpha({"asha": {"u1": 3}, "ben": {"u2": 4}}, "ordinal", [1, 2, 3, 4, 5]) is None
    assert krippendorff_alpha({"asha": {"u1": "A", "u2": "A"}, "ben": {"u1": "A", "u2": "A"}}, "nominal") is None
    assert krippendorff_alpha({}, "nominal") is None
    with pytest.raises(ValueError, match="level"):
        krippendorff_alpha({"a": {"u": 1}}, "cardinal")


def test_reliability_matrix_layout():
    m, coders, units = reliability_matrix({"b": {"u2": 5}, "a": {"u1": 1, "u2": 2}})
    assert coders == ["a", "b"] and units == ["u1", "u2"]
    np.testing.assert_array_equal(m, [[1, 2], [np.nan, 5]])


def exact_bootstrap_quantiles(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The (1-c)/2 and (1+c)/2 quantiles of the exact bootstrap distribution of the mean (all n^n
    equally likely resamples, inverse CDF), and how far the CDF steps around them are from those
    levels (a Monte Carlo percentile is sure to land on the same value only away from a step)."""
    means = np.sort([float(np.mean(s)) for s in itertools.product(values, repeat=len(values))])
    tail = (1 - confidence) / 2
    low, high = (float(np.quantile(means, q, method="inverted_cdf")) for q in (tail, 1 - tail))
    cdf = lambda x: float(np.mean(means <= x))  # noqa: E731
    below = lambda x: float(np.mean(means < x))  # noqa: E731
    margin = min(cdf(low) - tail, tail - below(low), cdf(high) - (1 - tail), (1 - tail) - below(high))
    return low, high, margin


def test_bootstrap_ci_of_two_values_is_their_range():
    # Resamples of [0, 1]: means 0 (1/4), 0.5 (1/2), 1 (1/4); the 2.5 % and 97.5 % points are 0 and 1.
    est = bootstrap_mean([0.0, 1.0])
    assert (est.mean, est.low, est.high, est.n) == (0.5, 0.0, 1.0, 2)


@pytest.mark.parametrize("values", [[1.0, 2.0, 4.0], [2.0, 3.0, 3.0, 5.0], [1.0, 1.0, 5.0, 5.0, 3.0]])
def test_bootstrap_ci_matches_the_exact_bootstrap_distribution(values):
    low, high, margin = exact_bootstrap_quantiles(values)
    # The quantile levels sit well inside a step of the exact CDF: 20k resamples estimate the level
    # to about +-0.1 %, so the Monte Carlo percentile must be exactly that resample mean.
    assert margin > 0.005, "choose data whose 2.5 % / 97.5 % points are not at a CDF step"
    est = bootstrap_mean(values, n_resamples=20000, seed=3)
    assert est.mean == pytest.approx(np.mean(values))
    assert (est.low, est.high) == pytest.approx((low, high), abs=1e-9)


def test_bootstrap_ci_equals_direct_numpy_resampling_with_the_same_generator():
    # scipy's percentile method draws each resample with rng.integers(0, n, n) (vectorised:
    # one [resamples, n] draw) and takes the percentiles of the resampled means.
    values = np.array([3.0, 4.5, 2.0, 4.0, 5.0, 1.5, 3.5])
    est = bootstrap_mean(values, n_resamples=999, seed=11)
    idx = np.random.default_rng(11).integers(0, len(values), (999, len(values)))
    means = values[idx].mean(axis=1)
    assert (est.low, est.high) == pytest.approx((np.percentile(means, 2.5), np.percentile(means, 97.5)), abs=1e-12)


def test_degenerate_and_tiny_samples():
    assert bootstrap_mean([4.0, 4.0, 4.0]).as_dict() == {"mean": 4.0, "ci_low": 4.0, "ci_high": 4.0, "n": 3}
    one = bootstrap_mean([2.5])
    assert (one.mean, one.low, one.high, one.n) == (2.5, None, None, 1) and one.text() == "2.50 (n=1)"
    assert bootstrap_mean([]).text() == "n/a"
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean([1.0, float("nan")])
    # Same data and seed, same interval: reports reproduce.
    assert bootstrap_mean([1, 2, 3, 5], seed=4) == bootstrap_mean([1, 2, 3, 5], seed=4)
