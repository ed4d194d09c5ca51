"""The phase pool (training.dpo.pool): the step order of pairs and the checkpoint state."""

import io

import torch

from training.dpo.pool import PhasePool, empty_batch


def _pool(pairs: int, phase: int = 3) -> PhasePool:
    rows = empty_batch()
    return PhasePool(phase, rows, torch.zeros(0, 1), torch.zeros(0, 1), torch.arange(pairs),
                     torch.arange(pairs).flip(0), torch.zeros(pairs, dtype=torch.long),
                     {"phase": phase, "reward": 0.25, "pairs": pairs, "dropped_groups": 1})


def test_steps_visit_every_pair_once_per_epoch_without_repeats_in_a_step():
    pool = _pool(10)
    steps = [pool.step_pairs(k, 4, seed=7) for k in range(5)]  # 20 draws = two epochs of 10
    assert all(len(s) == 4 and len(set(s)) == 4 for s in steps[:2])
    flat = [i for s in steps for i in s]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert steps == [pool.step_pairs(k, 4, seed=7) for k in range(5)]   # a function of (seed, phase, k)
    assert steps != [_pool(10, phase=4).step_pairs(k, 4, seed=7) for k in range(5)]
    assert sorted(pool.step_pairs(0, 32, seed=7)) == list(range(10))  # fewer pairs than asked: each pair once
    assert _pool(0).step_pairs(0, 4, seed=7) == []


def test_state_round_trips_through_a_weights_only_load():
    pool = _pool(6)
    buffer = io.BytesIO()
    torch.save(pool.state(), buffer)
    buffer.seek(0)
    back = PhasePool.from_state(torch.load(buffer, weights_only=True))  # tensors and numbers only: no pickle
    assert back.phase == 3 and back.stats == pool.stats
    assert torch.equal(back.chosen, pool.chosen) and torch.equal(back.rejected, pool.rejected)
    assert torch.equal(back.rows.token_mask, pool.rows.token_mask) and back.rows.token_mask.dtype == torch.bool
