"""evaluation.arena.bradley_terry against a simulation with known strengths, and its edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.arena.bradley_terry import (
    Battles,
    bootstrap_strengths,
    fit_strengths,
    leaderboard,
    matrices,
    ranks_from_intervals,
    to_rating,
)
from evaluation.arena.simulate import Truth

TRUTH = Truth(tuple(f"s{k}" for k in range(6)), np.array([1.2, 0.7, 0.3, 0.0, -0.4, -0.9]))


def test_simulated_votes_recover_the_order_and_the_centred_strengths():
    battles = Battles.of(TRUTH.systems, TRUTH.votes(4000, np.random.default_rng(0)))
    theta = fit_strengths(battles.counts(), battles.pairs, 6)
    assert list(np.argsort(-theta)) == list(range(6))
    np.testing.assert_allclose(theta, TRUTH.theta - TRUTH.theta.mean(), atol=0.12)
    rows = leaderboard(battles, rounds=500, seed=0)
    assert [row["system"] for row in rows] == list(TRUTH.systems) and rows[0]["rank"] == 1
    assert all(row["ci_low"] < row["rating"] < row["ci_high"] for row in rows)


def test_the_true_strengths_lie_inside_the_95_intervals_at_about_the_nominal_rate():
    rng, inside = np.random.default_rng(1), []
    centred = TRUTH.theta - TRUTH.theta.mean()
    for run in range(40):
        battles = Battles.of(TRUTH.systems, TRUTH.votes(1200, rng))
        lower, upper = np.percentile(bootstrap_strengths(battles, 400, seed=run), [2.5, 97.5], axis=0)
        inside += list((lower <= centred) & (centred <= upper))
    assert 0.90 <= np.mean(inside) <= 0.99, np.mean(inside)  # 240 intervals; nominal 0.95


def test_ties_count_half_to_each_side():
    only_ties = Battles.of(["a", "b"], [("a", "b", 0.5)] * 20)
    np.testing.assert_allclose(fit_strengths(only_ties.counts(), only_ties.pairs, 2), [0.0, 0.0], atol=1e-9)
    # 30 wins, 10 losses, 20 ties: a's score is 40 of 60, so the odds are 2:1 (the prior barely moves them)
    mixed = Battles.of(["a", "b"], [("a", "b", 1.0)] * 30 + [("b", "a", 1.0)] * 10 + [("b", "a", 0.5)] * 20)
    theta = fit_strengths(mixed.counts(), mixed.pairs, 2)
    assert theta[0] - theta[1] == pytest.approx(np.log(2.0), abs=0.01)
    win_rate, played = matrices(mixed)
    assert win_rate[0, 1] == pytest.approx(40 / 60) and played[0, 1] == played[1, 0] == 60


def test_an_unbeaten_system_stays_finite_and_a_system_without_votes_is_unranked():
    battles = Battles.of(["best", "mid", "low", "new"], [("best", "mid", 1.0)] * 15 + [("mid", "low", 1.0)] * 8
                         + [("low", "mid", 1.0)] * 4)
    rows = {row["system"]: row for row in leaderboard(battles, rounds=300, seed=0)}
    assert np.isfinite(rows["best"]["rating"]) and rows["best"]["rank"] == 1
    assert rows["new"] == {"system": "new", "rating": None, "ci_low": None, "ci_high": None, "rank": None,
                           "battles": 0, "win_rate": None}
    assert list(rows)[-1] == "new"  # unranked systems come last


def test_ranks_share_a_place_until_the_intervals_separate():
    lower, upper = np.array([10.0, 8.0, 1.0]), np.array([12.0, 11.0, 3.0])
    assert ranks_from_intervals(lower, upper).tolist() == [1, 1, 3]
    assert to_rating(0.0) == 1000.0 and to_rating(np.log(10.0)) == pytest.approx(1400.0)


def test_the_bootstrap_is_reproducible_from_its_seed_and_a_bad_battle_is_refused():
    battles = Battles.of(TRUTH.systems, TRUTH.votes(300, np.random.default_rng(2)))
    np.testing.assert_array_equal(bootstrap_strengths(battles, 50, seed=3), bootstrap_strengths(battles, 50, seed=3))
    with pytest.raises(ValueError, match="two systems"):
        Battles.of(["a"], [("a", "a", 1.0)])
    with pytest.raises(ValueError, match="an outcome in"):
        Battles.of(["a", "b"], [("a", "b", 0.7)])
