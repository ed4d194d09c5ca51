"""Which two systems the arena plays next: informative pairs favoured, every pair still possible.

    sampler = PairSampler(["rumik-oss-1:Ira", "espeak", "tiny"], seed=0)
    sampler.update(battles)              # after votes: refit strengths and their intervals
    a, b = sampler.sample()              # names, in random left/right order
    language = next_language({"en": 40, "hi": 12}, ["en", "hi", "ta"])   # the least-played: "ta"

A pair's weight is FLOOR (so every pair stays possible) plus
`overlap * closeness * (width_i + width_j)`: `closeness` = 4 p (1 - p) with p the fitted chance that
one beats the other (a battle tells most about a close pair), `width` the system's 95 % interval in
log-odds (PRIOR_WIDTH while it has fewer than MIN_BATTLES: few votes, wide interval), and `overlap`
1 when the two intervals overlap, else RESOLVED (the order of that pair is already known).
The gain over uniform sampling is measured by benchmarks/arena_sampling.py (docs/arena.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from evaluation.arena.bradley_terry import Battles, bootstrap_strengths, fit_strengths

FLOOR = 0.05
RESOLVED = 0.1
PRIOR_WIDTH = 4.0  # log-odds: about the width of a 95 % interval after a handful of battles
MIN_BATTLES = 5
SAMPLER_ROUNDS = 200  # bootstrap rounds per refit: widths need less precision than a published interval


class PairSampler:
    """Pair weights from the current fit (module docstring); `sample()` draws one pair."""

    def __init__(self, systems: Sequence[str], seed: int | None = None):
        if len(set(systems)) < 2:
            raise ValueError("an arena needs at least two different systems")
        self.systems = tuple(systems)
        self.rng = np.random.default_rng(seed)
        k = len(self.systems)
        self.theta, self.lower, self.upper = np.zeros(k), np.full(k, -PRIOR_WIDTH / 2), np.full(k, PRIOR_WIDTH / 2)
        self.battles = np.zeros(k)

    def update(self, battles: Battles) -> None:
        """Refit from every battle so far (systems not in `self.systems` are ignored)."""
        position = {name: k for k, name in enumerate(battles.systems)}
        order = [position.get(name) for name in self.systems]
        seen = battles.battles_of()
        self.battles = np.array([seen[k] if k is not None else 0.0 for k in order])
        if len(battles.outcome_index) == 0:
            return
        theta = fit_strengths(battles.counts(), battles.pairs, len(battles.systems))
        lower, upper = np.percentile(bootstrap_strengths(battles, SAMPLER_ROUNDS, int(self.rng.integers(2**31))),
                                     [2.5, 97.5], axis=0)
        for slot, k in enumerate(order):
            if k is not None and seen[k] >= MIN_BATTLES:
                self.theta[slot], self.lower[slot], self.upper[slot] = theta[k], lower[k], upper[k]

    def weights(self) -> np.ndarray:
        """[K, K] symmetric pair weights, 0 on the diagonal."""
        width = np.where(self.battles >= MIN_BATTLES, self.upper - self.lower, PRIOR_WIDTH)
        p = 1.0 / (1.0 + np.exp(-(self.theta[:, None] - self.theta[None, :])))
        overlap = (self.lower[:, None] <= self.upper[None, :]) & (self.lower[None, :] <= self.upper[:, None])
        weight = FLOOR + np.where(overlap, 1.0, RESOLVED) * 4.0 * p * (1.0 - p) * (width[:, None] + width[None, :])
        np.fill_diagonal(weight, 0.0)
        return weight

    def sample(self) -> tuple[str, str]:
        """Two different systems drawn by weight, in random order (neither side is favoured)."""
        weight = np.triu(self.weights(), k=1).reshape(-1)
        cell = int(self.rng.choice(weight.size, p=weight / weight.sum()))
        i, j = divmod(cell, len(self.systems))
        if self.rng.random() < 0.5:
            i, j = j, i
        return self.systems[i], self.systems[j]


def next_language(played: Mapping[str, int], languages: Sequence[str], rng: np.random.Generator | None = None) -> str:
    """The language of `languages` with the fewest battles so far (ties drawn at random)."""
    if not languages:
        raise ValueError("the prompt set names no language")
    fewest = min(played.get(language, 0) for language in languages)
    candidates = [language for language in languages if played.get(language, 0) == fewest]
    return candidates[int((rng or np.random.default_rng()).integers(len(candidates)))]
