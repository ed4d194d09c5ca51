"""Votes drawn from known strengths, to check the leaderboard and the pair sampler against the truth.

    truth = Truth(("s0", "s1", "s2"), np.array([0.8, 0.0, -0.8]))
    votes = truth.votes(3000, np.random.default_rng(0))                 # uniform pairs
    battles_needed = until_top3_separated(truth, PairSampler(truth.systems, seed=0), rng)

A battle between i and j ends in a tie with chance `tie_rate`; otherwise i wins with the chance that
makes i's expected score (a tie as half) sigmoid(theta_i - theta_j), the model the leaderboard fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.arena.bradley_terry import Battles, bootstrap_strengths, fit_strengths

CHECK_EVERY = 20  # battles between two looks at the top 3
CHECK_ROUNDS = 300
MAX_BATTLES = 20_000


@dataclass(frozen=True)
class Truth:
    """Systems and their true strengths (log-odds; centred before comparing with a fit)."""

    systems: tuple[str, ...]
    theta: np.ndarray
    tie_rate: float = 0.1

    def outcome(self, i: int, j: int, rng: np.random.Generator) -> float:
        p = 1.0 / (1.0 + np.exp(-(self.theta[i] - self.theta[j])))
        draw = rng.random()
        return 1.0 if draw < p - self.tie_rate / 2 else 0.5 if draw < p + self.tie_rate / 2 else 0.0

    def votes(self, count: int, rng: np.random.Generator) -> list[tuple[str, str, float]]:
        """`count` battles between uniformly drawn pairs, as (system_a, system_b, outcome for a)."""
        out = []
        for _ in range(count):
            i, j = rng.choice(len(self.systems), size=2, replace=False)
            out.append((self.systems[i], self.systems[j], self.outcome(i, j, rng)))
        return out


def top3_separated(battles: Battles, truth: Truth, seed: int) -> bool:
    """The fitted top 3 is the true top 3 in the true order, and their 95 % intervals do not overlap."""
    theta = fit_strengths(battles.counts(), battles.pairs, len(battles.systems))
    lower, upper = np.percentile(bootstrap_strengths(battles, CHECK_ROUNDS, seed), [2.5, 97.5], axis=0)
    fitted, true = np.argsort(-theta)[:3], np.argsort(-truth.theta)[:3]
    return bool(np.array_equal(fitted, true) and lower[fitted[0]] > upper[fitted[1]]
                and lower[fitted[1]] > upper[fitted[2]])


def until_top3_separated(truth: Truth, sampler, rng: np.random.Generator) -> int:
    """Battles played (pairs from `sampler`, or uniform when None) until `top3_separated`, at most MAX_BATTLES."""
    position = {name: k for k, name in enumerate(truth.systems)}
    votes: list[tuple[str, str, float]] = []
    while len(votes) < MAX_BATTLES:
        for _ in range(CHECK_EVERY):
            if sampler is None:
                a, b = rng.choice(truth.systems, size=2, replace=False).tolist()
            else:
                a, b = sampler.sample()
            votes.append((a, b, truth.outcome(position[a], position[b], rng)))
        battles = Battles.of(truth.systems, votes)
        if sampler is not None:
            sampler.update(battles)
        if top3_separated(battles, truth, seed=len(votes)):
            break
    return len(votes)
