"""Pair building (training.dpo.pairs) on hand-made groups: best vs worst, ties, margins, flat
groups, abstentions, the per-group cap, and totals over streams."""

import math

import pytest
import torch

from training.dpo.pairs import TOTAL, build_pairs, group_totals, rank_pairs

NAN = math.nan


def _rows(pairs):
    return list(zip(pairs.group.tolist(), pairs.chosen.tolist(), pairs.rejected.tolist(), pairs.stream.tolist(),
                    strict=True))


def test_best_vs_worst_takes_the_first_best_and_the_first_worst():
    values = torch.tensor([0.2, 0.9, 0.1, 0.9, 0.1])
    assert rank_pairs(values, cap=1) == [(1, 2, pytest.approx(0.8))]


def test_all_pairs_above_the_margin_largest_gap_first_and_capped():
    values = torch.tensor([0.5, 1.0, 0.0, 0.5])
    gaps = {(i, j): g for i, j, g in rank_pairs(values, min_margin=0.0, cap=0)}
    # every ordered pair with a positive gap; the two members at 0.5 tie, so (0, 3) and (3, 0) are absent
    assert set(gaps) == {(1, 2), (1, 0), (1, 3), (0, 2), (3, 2)}
    # largest gap first; equal gaps in member order
    assert [(i, j) for i, j, _ in rank_pairs(values, cap=0)] == [(1, 2), (0, 2), (1, 0), (1, 3), (3, 2)]
    assert [(i, j) for i, j, _ in rank_pairs(values, cap=2)] == [(1, 2), (0, 2)]
    assert [(i, j) for i, j, _ in rank_pairs(values, min_margin=0.75, cap=0)] == [(1, 2)]
    assert rank_pairs(values, min_margin=1.5, cap=0) == []
    assert len(rank_pairs(values, min_margin=0.5, cap=0)) == 5  # a gap equal to the margin is kept


def test_flat_groups_ties_and_abstainers_give_no_pair_and_are_counted():
    rewards = torch.tensor([
        [[0.3], [0.3], [0.3], [0.3]],        # flat: dropped
        [[0.1], [0.7], [NAN], [0.4]],        # abstainer sits out: 0.7 vs 0.1
        [[NAN], [0.5], [NAN], [NAN]],        # one scorer: dropped
        [[0.50], [0.52], [0.51], [0.50]],    # every gap below the margin: dropped
    ], dtype=torch.float64)
    pairs = build_pairs(rewards, by_stream=True, min_margin=0.05, cap=1)
    assert _rows(pairs) == [(1, 1, 0, 0)]
    assert pairs.margin.tolist() == [pytest.approx(0.6)]
    assert (pairs.dropped, pairs.units) == (3, 4)
    assert build_pairs(rewards, by_stream=True, min_margin=0.0, cap=1).dropped == 2  # group 3 now pairs (0.52, 0.50)


def test_routed_pairs_are_formed_per_stream_and_flat_ones_by_the_total():
    # two streams: in group 0 content prefers sample 0, duration prefers sample 2
    rewards = torch.tensor([[[0.9, -0.5], [0.5, -0.3], [0.1, -0.1]],
                            [[0.4, -0.2], [0.4, -0.2], [0.4, -0.2]]], dtype=torch.float64)
    routed = build_pairs(rewards, by_stream=True, cap=1)
    assert _rows(routed) == [(0, 0, 2, 0), (0, 2, 0, 1)] and routed.dropped == 2 and routed.units == 4
    flat = build_pairs(rewards, by_stream=False, cap=1)
    # totals 0.4, 0.2, 0.0: best 0 vs worst 2; group 1 is flat
    assert _rows(flat) == [(0, 0, 2, TOTAL)] and flat.margin.tolist() == [pytest.approx(0.4)]
    assert (flat.dropped, flat.units) == (1, 2)


def test_totals_skip_streams_nobody_scored_and_members_missing_a_stream():
    rewards = torch.tensor([[[0.5, NAN], [0.2, NAN], [0.9, NAN]],     # stream 1 unscored by all: totals of stream 0
                            [[0.5, -0.1], [0.7, NAN], [0.1, -0.4]]],  # member 1 lacks a term the others have
                           dtype=torch.float64)
    totals = group_totals(rewards)
    assert totals[0].tolist() == pytest.approx([0.5, 0.2, 0.9])
    assert totals[1, 0].item() == pytest.approx(0.4) and math.isnan(totals[1, 1])
    assert totals[1, 2].item() == pytest.approx(-0.3)
    flat = build_pairs(rewards, by_stream=False, cap=1)
    assert _rows(flat) == [(0, 2, 1, TOTAL), (1, 0, 2, TOTAL)]


def test_no_pairs_at_all_is_an_empty_set():
    pairs = build_pairs(torch.full((2, 4, 1), 0.5, dtype=torch.float64), by_stream=True)
    assert len(pairs) == 0 and pairs.dropped == 2 and pairs.group.dtype == torch.long and pairs.margin.numel() == 0
