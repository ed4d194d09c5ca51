"""Chosen/rejected pairs from scored groups (docs/ARCHITECTURE.md §14). Pure tensor code, no model.

Library module, no command line; `training.dpo.trainer` calls it once per phase::

    pairs = build_pairs(rewards, by_stream=True, min_margin=0.05, cap=1)   # rewards: [P, G, S]
    pairs.group, pairs.chosen, pairs.rejected, pairs.stream, pairs.margin  # [n] each
    pairs.dropped                                                           # units with no pair

The rule, for one group and one key (a reward stream s when `by_stream`, else the total):
the members that scored are compared two by two; a pair (i, j) needs r_i - r_j > 0 and
r_i - r_j >= min_margin; pairs are ranked by that gap, largest first (ties in the gap by
member index), and the first `cap` are kept (0: all). cap = 1 is "best vs worst": the largest
gap is max - min, between the first best and the first worst member. A group whose scoring
members all got the same reward (a flat group), or whose gaps are all below the margin, or
with fewer than two scoring members, gives no pair and counts once in `dropped`.

Scores. By stream, a member that abstained (NaN) in that stream sits out. The total is the
sum over streams (GRPO's `reward`), but a stream no member of the group scored is left out
of it, and a member that abstained where another scored sits out (its total would not be
comparable: it lacks a term the others have).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TOTAL = -1  # the `stream` of a pair formed by the total reward


@dataclass
class PairSet:
    """The pairs of a phase, in (group, key, rank) order. n pairs.

    group: [n] long, the prompt's index in the phase; chosen, rejected: [n] long, sample
    indices in the group (0..G-1); stream: [n] long, the reward stream that formed the pair
    (TOTAL: the total reward); margin: [n] float64, r_chosen - r_rejected in that key's units;
    dropped: (group, key) units that gave no pair; units: (group, key) units considered.
    """

    group: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor
    stream: torch.Tensor
    margin: torch.Tensor
    dropped: int
    units: int

    def __len__(self) -> int:
        return int(self.group.numel())


def group_totals(rewards: torch.Tensor) -> torch.Tensor:
    """Total reward per member: [P, G, S] (NaN = abstained) -> [P, G] float64, NaN where a
    member sits out (module docstring)."""
    rewards = rewards.to(torch.float64)
    scored = ~torch.isnan(rewards)
    used = scored.any(1, keepdim=True)              # [P, 1, S]: someone in the group scored stream s
    missing = (used & ~scored).any(2)               # [P, G]: abstained where another member scored
    total = torch.nansum(rewards, 2)
    return torch.where(missing | ~used.any(2), torch.full_like(total, math.nan), total)


def rank_pairs(values: torch.Tensor, min_margin: float = 0.0, cap: int = 1) -> list[tuple[int, int, float]]:
    """(chosen, rejected, gap) of one group's pairs (module docstring). values: [G] float, NaN
    = sits out; cap 0 = every pair."""
    v = values.to(torch.float64).tolist()
    members = [i for i, x in enumerate(v) if not math.isnan(x)]
    found = [(v[i] - v[j], i, j) for i in members for j in members if v[i] - v[j] > 0 and v[i] - v[j] >= min_margin]
    found.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [(i, j, gap) for gap, i, j in (found[:cap] if cap else found)]


def build_pairs(rewards: torch.Tensor, by_stream: bool, min_margin: float = 0.0, cap: int = 1) -> PairSet:
    """The pairs of every group. rewards: [P, G, S] float (NaN = abstained); by_stream: every
    stream forms its own pairs (routed DPO), else one key, the total reward (flat DPO)."""
    keys = list(range(rewards.shape[2])) if by_stream else [TOTAL]
    totals = None if by_stream else group_totals(rewards)
    rows, dropped = [], 0
    for g in range(rewards.shape[0]):
        for key in keys:
            values = totals[g] if key == TOTAL else rewards[g, :, key]
            found = rank_pairs(values, min_margin, cap)
            dropped += not found
            rows += [(g, i, j, key, gap) for i, j, gap in found]
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
    as_long = [torch.tensor(c, dtype=torch.long) for c in cols[:4]]
    return PairSet(*as_long, margin=torch.tensor(cols[4], dtype=torch.float64), dropped=dropped,
                   units=rewards.shape[0] * len(keys))
