"""Bradley–Terry strengths from pairwise votes, with ties, bootstrap 95 % intervals and ranks that respect them.

    from evaluation.arena.bradley_terry import Battles, fit_strengths, leaderboard
    battles = Battles.of(["tiny", "espeak"], [("tiny", "espeak", 1.0), ("espeak", "tiny", 0.5)])
    theta = fit_strengths(battles.counts(), battles.pairs, len(battles.systems))   # [K] log-odds, mean 0
    rows = leaderboard(battles, rounds=1000, seed=0)     # one row per system, best first

The model: P(A beats B) = sigmoid(theta_A - theta_B). A vote's outcome is 1 (A won), 0 (B won) or
0.5 (a tie, or both bad: LMArena's convention, a tie counts half a win to each side), and the
strengths maximise the log-likelihood of every outcome plus a weak Gaussian prior (RIDGE: a prior
sd of 10 log-odds), which keeps an unbeaten system finite and pins the mean at 0. Newton's method
on the K strengths, batched over bootstrap rounds.

Reported like LMArena's leaderboard: rating = 1000 + 400 / ln(10) * theta (Elo's scale: 400 points
are 10:1 odds), a 95 % interval from `rounds` bootstrap resamples of the battles (percentiles 2.5 and
97.5), and rank = 1 + the number of systems whose lower bound is above this system's upper bound,
so systems that cannot be told apart share a rank. A system without a battle is listed unranked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

RIDGE = 0.01  # Gaussian prior precision on each strength (log-odds units)
NEWTON_STEPS = 50
NEWTON_TOL = 1e-9
MAX_STEP = 4.0  # log-odds per Newton step: a separated pair converges without overshooting
SCALE = 400.0 / math.log(10.0)
BASE_RATING = 1000.0
ROUNDS = 1000
OUTCOMES = (1.0, 0.5, 0.0)  # A won, tie, B won: the columns of Battles.counts()


@dataclass(frozen=True)
class Battles:
    """Battles between `systems`: `pairs` [P, 2] (i < j) and `outcome_index` [N] into pairs x OUTCOMES
    (3 * pair + column), the outcome seen from the pair's first system."""

    systems: tuple[str, ...]
    pairs: np.ndarray
    outcome_index: np.ndarray

    @classmethod
    def of(cls, systems: Sequence[str], votes: Iterable[tuple[str, str, float]]) -> "Battles":
        """From (system_a, system_b, outcome for a in OUTCOMES) triples; every system named in `systems`."""
        position = {name: k for k, name in enumerate(systems)}
        pair_ids: dict[tuple[int, int], int] = {}
        indices = []
        for a, b, outcome in votes:
            i, j = position[a], position[b]
            if i == j or outcome not in OUTCOMES:
                raise ValueError(f"a battle needs two systems and an outcome in {OUTCOMES}: {a}, {b}, {outcome}")
            if i > j:
                i, j, outcome = j, i, 1.0 - outcome
            pair = pair_ids.setdefault((i, j), len(pair_ids))
            indices.append(3 * pair + OUTCOMES.index(outcome))
        pairs = np.array(list(pair_ids), dtype=np.int64).reshape(-1, 2)
        return cls(tuple(systems), pairs, np.array(indices, dtype=np.int64))

    @classmethod
    def of_counts(cls, systems: Sequence[str], groups: Iterable[tuple[str, str, float, int]]) -> "Battles":
        """From (system_a, system_b, outcome for a, how many) groups: the battles `of` would give for that
        many copies of each triple (a database's GROUP BY, without a row per battle)."""
        groups = list(groups)
        one_each = cls.of(systems, ((a, b, outcome) for a, b, outcome, _ in groups))
        repeats = np.array([count for *_, count in groups], dtype=np.int64)
        return cls(one_each.systems, one_each.pairs, np.repeat(one_each.outcome_index, repeats))

    def counts(self) -> np.ndarray:
        """[P, 3] battles of each pair ending in each outcome."""
        return np.bincount(self.outcome_index, minlength=3 * len(self.pairs)).reshape(-1, 3).astype(np.float64)

    def battles_of(self) -> np.ndarray:
        """[K] battles each system took part in."""
        per_pair = self.counts().sum(axis=1)
        totals = np.zeros(len(self.systems))
        np.add.at(totals, self.pairs[:, 0], per_pair)
        np.add.at(totals, self.pairs[:, 1], per_pair)
        return totals


def fit_strengths(counts: np.ndarray, pairs: np.ndarray, n_systems: int) -> np.ndarray:
    """Strengths (log-odds, mean 0) maximising the tie-aware likelihood plus the RIDGE prior.
    counts: [P, 3] or a batch [B, P, 3]; returns [K] or [B, K]."""
    batched = counts.ndim == 3
    counts = counts if batched else counts[None]
    totals = counts.sum(axis=2)                                         # [B, P]
    won = counts[..., 0] + 0.5 * counts[..., 1]                         # [B, P] A's share of wins
    incidence = np.zeros((len(pairs), n_systems))
    incidence[np.arange(len(pairs)), pairs[:, 0]] = 1.0
    incidence[np.arange(len(pairs)), pairs[:, 1]] = -1.0
    theta = np.zeros((counts.shape[0], n_systems))
    eye = np.eye(n_systems)
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-(theta @ incidence.T)))               # [B, P] P(first system wins)
        gradient = (totals * p - won) @ incidence + RIDGE * theta       # of the negative log-posterior
        weights = totals * p * (1.0 - p)
        hessian = np.einsum("bp,pk,pl->bkl", weights, incidence, incidence) + RIDGE * eye
        step = np.linalg.solve(hessian, gradient[..., None])[..., 0]
        step *= np.minimum(1.0, MAX_STEP / np.maximum(np.abs(step).max(axis=1, keepdims=True), 1e-300))
        theta -= step
        if np.abs(step).max() < NEWTON_TOL:
            break
    return theta if batched else theta[0]


def bootstrap_strengths(battles: Battles, rounds: int = ROUNDS, seed: int = 0) -> np.ndarray:
    """[rounds, K] strengths of battles resampled with replacement (a multinomial over the observed
    (pair, outcome) cells is the same draw, without materialising the battles)."""
    total = len(battles.outcome_index)
    cells = battles.counts().reshape(-1)
    draws = np.random.default_rng(seed).multinomial(total, cells / total, size=rounds)
    return fit_strengths(draws.reshape(rounds, -1, 3).astype(np.float64), battles.pairs, len(battles.systems))


def ranks_from_intervals(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """[K] 1 + the number of systems whose lower bound is above each one's upper bound."""
    return 1 + (lower[None, :] > upper[:, None]).sum(axis=1)


def to_rating(theta: np.ndarray | float) -> np.ndarray | float:
    """Log-odds strengths on Elo's scale (1000 at the mean, 400 points = 10:1 odds)."""
    return BASE_RATING + SCALE * theta


def leaderboard(battles: Battles, rounds: int = ROUNDS, seed: int = 0) -> list[dict]:
    """One row per system, ranked first then by rating: system, rating, ci_low, ci_high, rank,
    battles, win_rate (ties as half). Systems without a battle come last, unranked (None)."""
    seen = battles.battles_of()
    played = [k for k in range(len(battles.systems)) if seen[k] > 0]
    rows = [{"system": name, "rating": None, "ci_low": None, "ci_high": None, "rank": None, "battles": 0,
             "win_rate": None} for name in battles.systems]
    if len(played) >= 2:
        sub = Battles.of([battles.systems[k] for k in played], _triples(battles))
        theta = fit_strengths(sub.counts(), sub.pairs, len(played))
        spread = bootstrap_strengths(sub, rounds, seed)
        lower, upper = np.percentile(spread, [2.5, 97.5], axis=0)
        ranks = ranks_from_intervals(lower, upper)
        wins = _wins(sub)
        for slot, k in enumerate(played):
            rows[k].update(rating=float(to_rating(theta[slot])), ci_low=float(to_rating(lower[slot])),
                           ci_high=float(to_rating(upper[slot])), rank=int(ranks[slot]), battles=int(seen[k]),
                           win_rate=float(wins[slot] / seen[k]))
    return sorted(rows, key=lambda row: (row["rank"] is None, row["rank"] or 0, -(row["rating"] or 0.0)))


def _triples(battles: Battles) -> list[tuple[str, str, float]]:
    pair, column = np.divmod(battles.outcome_index, 3)
    return [(battles.systems[battles.pairs[p, 0]], battles.systems[battles.pairs[p, 1]], OUTCOMES[c])
            for p, c in zip(pair.tolist(), column.tolist(), strict=True)]


def _wins(battles: Battles) -> np.ndarray:
    """[K] wins of each system, a tie counting half."""
    counts, wins = battles.counts(), np.zeros(len(battles.systems))
    np.add.at(wins, battles.pairs[:, 0], counts[:, 0] + 0.5 * counts[:, 1])
    np.add.at(wins, battles.pairs[:, 1], counts[:, 2] + 0.5 * counts[:, 1])
    return wins


def matrices(battles: Battles) -> tuple[np.ndarray, np.ndarray]:
    """([K, K] win rate of row over column, ties half, NaN where they never met; [K, K] battle counts)."""
    k = len(battles.systems)
    counts, played, won = battles.counts(), np.zeros((k, k)), np.zeros((k, k))
    for (i, j), (a, tie, b) in zip(battles.pairs.tolist(), counts.tolist(), strict=True):
        played[i, j] = played[j, i] = a + tie + b
        won[i, j], won[j, i] = a + 0.5 * tie, b + 0.5 * tie
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(played > 0, won / played, np.nan), played
